// Package bench measures ipkeeper as a process the way a container runtime
// runs it, next to upstream host-local: `go test -bench . ./test/bench` for
// Go benchmarks, `make bench` (cmd/procbench) for latency percentiles.
package bench
