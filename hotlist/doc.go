// Package hotlist holds the candidate rings: per (tenant, queue, consumer
// group), which partitions might have work. A wildcard pop asks PostgreSQL
// only about the few partitions the ring names, and an idle queue costs
// PostgreSQL nothing.
//
// The package is a pure state machine: no goroutines, no I/O, and every
// operation takes the current time as an argument, so tests drive it with a
// fake clock. The broker owns the loops (wheel tick, wake tick, reseed
// floor, idle sweep) and the SQL.
//
// The ring may be wrong in exactly one direction: stale in excess. A
// partition in the ring that has nothing costs one empty claim; a partition
// missing from the ring would be a defect, which the periodic reseed floor
// heals. See docs/hotlist.md and the spec it implements.
package hotlist
