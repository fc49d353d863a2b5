package main

import (
	"fmt"
	"io"
	"log"
	"math"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// row is one run, measured on each plugin by name.
type row struct {
	what string
	by   map[string]*outcome
}

// pair prints f of Calico's and ipkeeper's outcome as "c / i".
func (r row) pair(f func(*outcome) string) string {
	cell := func(name string) string {
		if o := r.by[name]; o != nil {
			return f(o)
		}
		return "-"
	}
	return cell("calico") + " / " + cell("ipkeeper")
}

// p50Ratio is Calico's p50 over ipkeeper's.
func (r row) p50Ratio() float64 {
	c, i := r.by["calico"], r.by["ipkeeper"]
	if c == nil || i == nil || c.N == 0 || i.N == 0 {
		return math.NaN()
	}
	return ratio(float64(c.Pct(50)), float64(i.Pct(50)))
}

// rateRatio is ipkeeper's rate over Calico's.
func (r row) rateRatio() float64 {
	c, i := r.by["calico"], r.by["ipkeeper"]
	if c == nil || i == nil || c.Wall <= 0 || i.Wall <= 0 {
		return math.NaN()
	}
	return ratio(i.Rate(), c.Rate())
}

// ratio is a/b, or NaN when b is not positive.
func ratio(a, b float64) float64 {
	if !(b > 0) {
		return math.NaN()
	}
	return a / b
}

func pct(p float64) func(*outcome) string {
	return func(o *outcome) string {
		if o.N == 0 {
			return "-"
		}
		return latency.Ms(o.Pct(p))
	}
}

func rate(o *outcome) string {
	if o.Wall <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f/s", o.Rate())
}

// cpuPerCall is the mean CPU time of a successful call's process.
func cpuPerCall(o *outcome) string {
	if o.N == 0 {
		return "-"
	}
	return latency.Ms(o.CPU / time.Duration(o.N))
}

func errs(o *outcome) string { return fmt.Sprint(o.Errors) }

// fmtRatio prints a ratio as "12.30x", or "-" when it is not a number.
func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", r)
}

// printTable writes the runs as Markdown, then each plugin's first error.
func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| run | p50 calico / ipkeeper | p99 calico / ipkeeper | p50 calico/ipkeeper | rate calico / ipkeeper | rate ipkeeper/calico | CPU per call calico / ipkeeper | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.what, r.pair(pct(50)), r.pair(pct(99)),
			fmtRatio(r.p50Ratio()), r.pair(rate), fmtRatio(r.rateRatio()), r.pair(cpuPerCall), r.pair(errs))
	}
	for _, r := range rows {
		for _, name := range []string{"calico", "ipkeeper"} {
			if o := r.by[name]; o != nil && o.FirstErr != "" {
				fmt.Fprintf(w, "%s %s: first error: %s\n", r.what, name, o.FirstErr)
			}
		}
	}
}

// logRow reports a finished run on standard error.
func logRow(r row) {
	log.Printf("%-26s p50 %s  errors %s", r.what, r.pair(pct(50)), r.pair(errs))
}
