// Package clustertest holds the multi-process cluster and chaos tests: real
// queen-node processes on distinct loopback addresses against a real
// PostgreSQL, driven through the HTTP API and checked by a workload checker
// (nothing lost, per-partition order, no redelivery of acked messages,
// redeliveries only after a lease expired).
//
// Everything lives in _test.go files; this file only names the package.
// Run with `make cluster-test`; see docs/cluster-tests.md.
package clustertest
