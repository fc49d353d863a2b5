package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"
)

// Settling before a phase: the previous phase's work that outlives its
// calls (the API server collecting garbage and compacting, agents
// flushing, processes being reaped) would otherwise be charged to the
// next cell, whichever mode it measures.
const (
	settleIdle = 0.85                   // idle share of all CPUs that counts as settled
	settleTick = 100 * time.Millisecond // the window the share is measured over
	settleMax  = 10 * time.Second       // settling gives up after this
)

// settle waits until this machine's CPUs were idle for settleIdle of a
// settleTick window, at most settleMax; it reports whether they were.
func settle(ctx context.Context) bool {
	deadline := time.Now().Add(settleMax)
	idle, total, ok := cpuTimes()
	if !ok {
		return false
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(settleTick):
		}
		i, t, ok := cpuTimes()
		if !ok {
			return false
		}
		if t > total && float64(i-idle)/float64(t-total) >= settleIdle {
			return true
		}
		idle, total = i, t
	}
	return false
}

// cpuTimes returns the idle (idle and iowait) and total clock ticks of
// all CPUs from /proc/stat.
func cpuTimes() (idle, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return idle, total, true
}
