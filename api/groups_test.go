package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"
)

func jsonNum(s string) json.Number { return json.Number(s) }

func TestDeleteConsumerGroup(t *testing.T) {
	tb := setup(t)
	tb.fb.deleted = 3
	r := tb.do("DELETE", "/api/v1/consumer-groups/g%2F1", "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "consumerGroup,deletedPartitions,metadataDeleted,success" || m["consumerGroup"] != "g/1" ||
		m["deletedPartitions"] != jsonNum("3") || m["metadataDeleted"] != true || m["success"] != true {
		t.Fatalf("%s", r.body)
	}
	if tb.fb.groupName != "g/1" || tb.fb.groupQueue != "" || !tb.fb.groupMeta {
		t.Fatalf("%+v", tb.fb)
	}

	r = tb.do("DELETE", "/api/v1/consumer-groups/g/queues/q%2Fx?deleteMetadata=false", "")
	m = r.object(t)
	if keys(m) != "consumerGroup,deletedPartitions,metadataDeleted,queueName,success" || m["queueName"] != "q/x" || m["metadataDeleted"] != false {
		t.Fatalf("%s", r.body)
	}
	if tb.fb.groupQueue != "q/x" || tb.fb.groupMeta {
		t.Fatalf("%+v", tb.fb)
	}
	tb.do("DELETE", "/api/v1/consumer-groups/g?deleteMetadata=1", "")
	if !tb.fb.groupMeta {
		t.Fatal("deleteMetadata=1 is true")
	}
}

func TestSeek(t *testing.T) {
	tb := setup(t)
	r := tb.do("POST", "/api/v1/consumer-groups/g/queues/q/seek", `{"toEnd":true,"timestamp":null}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)
	m := r.object(t)
	if keys(m) != "consumerGroup,partitionsUpdated,queueName,seekToEnd,success,targetTimestamp" ||
		m["seekToEnd"] != true || m["targetTimestamp"] != nil || m["partitionsUpdated"] != jsonNum("2") {
		t.Fatalf("%s", r.body)
	}
	if !tb.fb.seekToEnd || tb.fb.seekTS != nil || tb.fb.groupName != "g" || tb.fb.groupQueue != "q" {
		t.Fatalf("%+v", tb.fb)
	}

	// Go sends time.RFC3339 with an offset.
	r = tb.do("POST", "/api/v1/consumer-groups/g/queues/q/seek", `{"timestamp":"2026-05-06T12:00:00+02:00","toEnd":false}`)
	m = r.object(t)
	if m["seekToEnd"] != false || m["targetTimestamp"] != "2026-05-06T10:00:00.000Z" {
		t.Fatalf("%s", r.body)
	}
	if tb.fb.seekToEnd || tb.fb.seekTS == nil || !tb.fb.seekTS.Equal(time.Date(2026, 5, 6, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("%+v", tb.fb.seekTS)
	}
}

func TestSeekValidation(t *testing.T) {
	neither := "Must specify either 'toEnd': true or 'timestamp'"
	cases := []struct{ body, msg string }{
		{`{}`, neither},
		{``, neither},
		{`{"toEnd":false}`, neither},
		{`{"toEnd":null,"timestamp":null}`, neither},
		{`{"toEnd":"yes"}`, "toEnd must be a boolean"},
		{`{"timestamp":12}`, "timestamp must be a string"},
		{`{"timestamp":"last tuesday"}`, ""},
		{`{"toEnd":true,"timestamp":"2026-05-06T10:00:00Z"}`, ""},
	}
	for _, c := range cases {
		tb := setup(t)
		tb.do("POST", "/api/v1/consumer-groups/g/queues/q/seek", c.body).wantError(t, http.StatusBadRequest, c.msg)
		tb.noBrokerCalls()
	}
}

func TestHealth(t *testing.T) {
	tb := setup(t)
	r := tb.do("GET", "/health", "")
	m := r.object(t)
	if r.status != 200 || keys(m) != "database,server,status,version" || m["status"] != "healthy" ||
		m["database"] != "connected" || m["server"] != "queen-node" || m["version"] != "v-test" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	checkJSONHeaders(t, r)

	tb.fb.healthErr = errors.New("dial tcp: connection refused")
	r = tb.do("GET", "/health", "")
	m = r.object(t)
	if r.status != 503 || m["status"] != "unhealthy" || m["database"] != "disconnected" || m["error"] != "dial tcp: connection refused" {
		t.Fatalf("%d %s", r.status, r.body)
	}
}
