package api

import (
	"net/http"
	"strings"

	"queen-node/broker"
	"queen-node/hotlist"
)

// HotlistBroker is the node core's hot-list view of a queue
// (GET /api/v1/status/hotlist/{queue}, docs/api.md).
type HotlistBroker interface {
	HotlistView(tenant, queue string, maxParts int) broker.HotlistView
}

// Bounds of the partitions listed per ring (query parameter limit).
const (
	defaultHotlistParts = 200
	maxHotlistParts     = 1000
)

// A ring's and an entry's JSON besides their names, about: the answer
// stops listing at Config.MaxReadBytes.
const (
	hotlistRingBytes  = 300
	hotlistEntryBytes = 120
)

func (s *Server) registerHotlist() {
	s.route("GET", "/api/v1/status/hotlist/{queue}", AccessReadOnly, s.handleHotlistView)
}

type hotlistViewJSON struct {
	Node           string            `json:"node"`
	Queue          string            `json:"queue"`
	Enabled        bool              `json:"enabled"`
	Registered     bool              `json:"registered"`
	Rings          []hotlistRingJSON `json:"rings"`
	RingsTruncated bool              `json:"ringsTruncated"`
}

type hotlistRingJSON struct {
	Group               string             `json:"group"`
	Ready               int                `json:"ready"`
	Wheel               int                `json:"wheel"`
	Inflight            int                `json:"inflight"`
	Unconfirmed         int                `json:"unconfirmed"`
	Cold                bool               `json:"cold"`
	Reseeding           bool               `json:"reseeding"`
	NextReseedInMs      int64              `json:"nextReseedInMs"`
	LastReseedAt        *string            `json:"lastReseedAt"`
	Partitions          []hotlistEntryJSON `json:"partitions"`
	PartitionsTruncated bool               `json:"partitionsTruncated"`
}

type hotlistEntryJSON struct {
	Name        string  `json:"name"`
	ID          *string `json:"id"`
	State       string  `json:"state"`
	DueInMs     *int64  `json:"dueInMs,omitempty"` // wheel only
	HeldMs      *int64  `json:"heldMs,omitempty"`  // inflight only
	Unconfirmed bool    `json:"unconfirmed"`
}

// GET /api/v1/status/hotlist/{queue}?limit: this node's rings of the
// caller's tenant's queue. A queue this node holds nothing for is 200 with
// registered false, not 404: the dashboard asks every member, and most
// never served the queue.
func (s *Server) handleHotlistView(w http.ResponseWriter, r *http.Request, c caller) {
	name := r.PathValue("queue")
	if err := checkName("queue", name); err != nil {
		writeReqError(w, err)
		return
	}
	limit, err := queryIntIn(r.URL.Query(), "limit", defaultHotlistParts, 0, maxHotlistParts)
	if err != nil {
		writeReqError(w, err)
		return
	}
	v := s.b.HotlistView(c.tenant, name, limit)
	out := hotlistViewJSON{Node: v.Node, Queue: name, Enabled: v.Enabled, Registered: v.Registered,
		Rings: make([]hotlistRingJSON, 0, len(v.Rings)), RingsTruncated: v.RingsTruncated}
	// 100 rings of 1000 entries with 255-byte names would pass the read
	// budget: the listing stops at it (truncated flags set), the counts stay.
	var size int64
	for _, rv := range v.Rings {
		size += hotlistRingBytes + int64(len(rv.Group))
		if size > s.cfg.MaxReadBytes && len(out.Rings) > 0 {
			out.RingsTruncated = true
			break
		}
		rj := hotlistRingJSON{Group: rv.Group, Ready: rv.Ready, Wheel: rv.Wheel, Inflight: rv.Inflight,
			Unconfirmed: rv.Unconfirmed, Cold: rv.Cold, Reseeding: rv.Reseeding,
			NextReseedInMs: rv.NextReseedIn.Milliseconds(), LastReseedAt: fmtMilliOrNull(rv.LastReseedAt),
			Partitions: make([]hotlistEntryJSON, 0, len(rv.Entries)), PartitionsTruncated: rv.Truncated}
		for _, e := range rv.Entries {
			size += hotlistEntryBytes + int64(len(e.Name)+len(e.ID))
			if size > s.cfg.MaxReadBytes {
				rj.PartitionsTruncated = true
				break
			}
			ej := hotlistEntryJSON{Name: e.Name, ID: nullable(e.ID), State: strings.ToLower(e.State.String()), Unconfirmed: e.Unconfirmed}
			switch e.State {
			case hotlist.Wheel:
				ms := e.DueIn.Milliseconds()
				ej.DueInMs = &ms
			case hotlist.Inflight:
				ms := e.Held.Milliseconds()
				ej.HeldMs = &ms
			}
			rj.Partitions = append(rj.Partitions, ej)
		}
		out.Rings = append(out.Rings, rj)
	}
	// A view is a snapshot; a cached one misleads.
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}
