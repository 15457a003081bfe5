package broker_test

import (
	"context"
	"testing"

	"queen-node/broker"
)

// TestAckURNPartitionIDIsNotFound: docs/api.md, "Acks", rule 6: an
// unknown (partitionId, transactionId) answers "Message not found" per
// item. A partitionId in the urn:uuid: spelling passes the broker's UUID
// check but not PostgreSQL's uuid input, so the whole call failed (a 500
// for the request) instead. (Pre-existing at d49fe2b.)
func TestAckURNPartitionIDIsNotFound(t *testing.T) {
	b := newBroker(t, false)
	res, err := b.Ack(context.Background(), "t", []broker.AckItem{
		{TransactionID: "x", PartitionID: "urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8", Group: "g"}})
	if err != nil {
		t.Fatalf("ack failed as a whole: %v", err)
	}
	if len(res) != 1 || res[0].Success || res[0].Error != "Message not found" {
		t.Fatalf("%+v, want one item answering Message not found", res)
	}
}
