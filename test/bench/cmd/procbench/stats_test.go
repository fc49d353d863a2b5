package main

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	s := summarize([]time.Duration{5, 1, 3, 2})
	want := summary{n: 4, median: 2, p90: 5, p99: 5, fastest: 1, slowest: 5}
	if s != want {
		t.Fatalf("summarize = %+v, want %+v", s, want)
	}
	if (summarize(nil) != summary{}) {
		t.Fatalf("summarize(nil) = %+v, want the zero summary", summarize(nil))
	}
}
