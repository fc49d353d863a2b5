package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// view is a command's result: -o json and -o yaml print its JSON form
// (field names and order are part of the CLI's contract), -o table calls
// table with a writer that aligns tab-separated cells.
type view interface {
	table(w io.Writer)
}

// print writes v in the chosen format.
func (c *cli) print(v view) error {
	out := c.env.Stdout
	switch c.output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	case "yaml":
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = out.Write(y)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	v.table(tw)
	return tw.Flush()
}

// row writes one table row.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// dash shows an empty cell as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// num renders a count for a person: exact up to 2^40, then as a power of
// two ("~2^64" for an IPv6 /64), where the last digits mean nothing.
func num[T int | uint64](n T) string {
	if u := uint64(n); u >= 1<<40 {
		return "~2^" + strconv.Itoa(bits.Len64(u-1))
	}
	return strconv.FormatUint(uint64(n), 10)
}

// since renders a handle's creation time, "-" when unknown.
func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// podName renders namespace/pod, "-" when unknown.
func podName(ns, pod string) string {
	switch {
	case pod == "":
		return "-"
	case ns == "":
		return pod
	}
	return ns + "/" + pod
}
