package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// row is one workload or density, measured on each side by name.
type row struct {
	name, what string
	by         map[string]*outcome
}

// table is what the run prints.
type table struct {
	rows    []row
	raw     latency.Result
	density []row
}

// pair prints f of the Calico side's and ipkeeper's outcome as "c / i".
func (r row) pair(f func(*outcome) string) string {
	cell := func(name string) string {
		o := r.by[name]
		if o == nil {
			return "-"
		}
		return f(o)
	}
	return cell("calico") + " / " + cell("ipkeeper")
}

// speedup is ipkeeper's rate over Calico's.
func (r row) speedup() float64 {
	c, i := r.by["calico"], r.by["ipkeeper"]
	if c == nil || i == nil || c.Wall <= 0 || i.Wall <= 0 {
		return ratio(0, 0)
	}
	return ratio(i.Rate(), c.Rate())
}

func p50(o *outcome) string {
	if len(o.Lat) == 0 {
		return "-"
	}
	return latency.Ms(o.Pct(50))
}

func bytesPerOp(o *outcome) string { return fmtBytes(perOp(o.Bytes, o.N)) }

func growthPer1000(o *outcome) string {
	return fmtBytes(perOp(o.DBGrowth*1000, o.N))
}

func errs(o *outcome) string { return fmt.Sprint(o.Errors) }

// print writes the table as Markdown: the workloads, the raw
// compare-and-swap row, and the density rows.
func (t table) print(w io.Writer, sides []string) {
	fmt.Fprintf(w, "\nsides: %s (cells read calico / ipkeeper; ratio = ipkeeper's rate / calico's)\n\n", strings.Join(sides, ", "))
	fmt.Fprintln(w, "| workload | rate calico / ipkeeper | ratio | errors | ADD p50 | value bytes per op | etcd db growth per 1 000 ops |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s: %s | %s | %s | %s | %s | %s | %s |\n", r.name, r.what, r.pair(fmtRate), fmtRatio(r.speedup()),
			r.pair(errs), r.pair(p50), r.pair(bytesPerOp), r.pair(growthPer1000))
	}
	raw := t.raw.Rate()
	cell := "-"
	if len(t.rows) > 0 {
		var parts []string
		for _, name := range []string{"calico", "ipkeeper"} {
			if o := t.rows[0].by[name]; o != nil && o.Wall > 0 {
				parts = append(parts, fmt.Sprintf("%s W1 = %s of it", name, fmtRatio(ratio(o.Rate(), raw))))
			}
		}
		cell = strings.Join(parts, ", ")
	}
	fmt.Fprintf(w, "| raw etcd compare-and-swap, 1 client | %.0f/s | %s | | %s | | |\n", raw, cell, latency.Ms(t.raw.Pct(50)))

	fmt.Fprintln(w, "\n| pods already on the node | ADD p50 calico / ipkeeper | value bytes per ADD calico / ipkeeper | errors |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range t.density {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.name, r.pair(p50), r.pair(bytesPerOp), r.pair(errs))
	}
	if n := len(t.density); n > 1 {
		first, last := t.density[0], t.density[n-1]
		for _, name := range sides {
			a, b := first.by[name], last.by[name]
			if a == nil || b == nil {
				continue
			}
			fmt.Fprintf(w, "\n%s, %s over %s: ADD p50 %s, bytes per ADD %s", name, last.name, first.name,
				fmtRatio(ratio(float64(b.Pct(50)), float64(a.Pct(50)))),
				fmtRatio(ratio(perOp(b.Bytes, b.N), perOp(a.Bytes, a.N))))
		}
		fmt.Fprintln(w)
	}
}
