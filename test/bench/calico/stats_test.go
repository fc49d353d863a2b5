package main

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseAnswer(t *testing.T) {
	o, v, err := parseAnswer([]byte(`{"lat":[3000000,1000000,2000000],"wallNs":4000000000,"errors":2,"firstErr":"boom","version":"v3.32.1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if v != "v3.32.1" || o.N != 3 || o.Errors != 2 || o.FirstErr != "boom" || o.Wall != 4*time.Second {
		t.Fatalf("parsed %+v version %q", o, v)
	}
	if got := o.Pct(50); got != 2*time.Millisecond {
		t.Errorf("p50 = %v, want 2ms", got)
	}
	if got := o.Rate(); got != 0.75 {
		t.Errorf("rate = %v, want 0.75 (3 successes in 4 s)", got)
	}
}

func TestParseAnswerRefusesWhatIsNoAnswer(t *testing.T) {
	for _, line := range []string{
		``,
		`time="x" level=info msg="a log line"`,
		`{"lat":"fast"}`,
		`{"lat":[1],"wallNs":-5}`,
		`{"lat":[1],"wallNs":5,"errors":-1}`,
	} {
		if _, _, err := parseAnswer([]byte(line)); !errors.Is(err, errBadAnswer) {
			t.Errorf("parseAnswer(%q) = %v, want errBadAnswer", line, err)
		}
	}
}

func TestPerOpAndRatio(t *testing.T) {
	if got := perOp(3000, 1000); got != 3 {
		t.Errorf("perOp = %v", got)
	}
	if !math.IsNaN(perOp(5, 0)) || !math.IsNaN(ratio(1, 0)) || !math.IsNaN(ratio(1, math.NaN())) {
		t.Error("nothing measured must give NaN, printed as -")
	}
	if got := ratio(10, 4); got != 2.5 {
		t.Errorf("ratio = %v", got)
	}
	for b, want := range map[float64]string{512: "512 B", 2048: "2.0 KiB", 3 << 20: "3.0 MiB", -(1 << 20): "-1.0 MiB", math.NaN(): "-"} {
		if got := fmtBytes(b); got != want {
			t.Errorf("fmtBytes(%v) = %q, want %q", b, got, want)
		}
	}
	if got := fmtRatio(math.NaN()); got != "-" {
		t.Errorf("fmtRatio(NaN) = %q", got)
	}
}

func TestTablePrintsBothSidesAndMissingOnes(t *testing.T) {
	cal := &outcome{Bytes: 2000, DBGrowth: 10 << 20}
	cal.N, cal.Wall, cal.Lat = 100, time.Second, []time.Duration{4 * time.Millisecond}
	ipk := &outcome{Bytes: 50000, DBGrowth: 1 << 20}
	ipk.N, ipk.Wall, ipk.Lat = 1000, time.Second, []time.Duration{time.Millisecond}
	tbl := table{rows: []row{{name: "W1", what: "1 node", by: map[string]*outcome{"calico": cal, "ipkeeper": ipk}}}}
	tbl.raw.N, tbl.raw.Wall = 2000, time.Second
	tbl.density = []row{
		{name: "10 pods", by: map[string]*outcome{"ipkeeper": ipk}},
		{name: "2000 pods", by: map[string]*outcome{"calico": {Errors: 5, FirstErr: "block limit"}, "ipkeeper": ipk}},
	}
	var buf bytes.Buffer
	tbl.print(&buf, []string{"calico", "ipkeeper"})
	out := buf.String()
	for _, want := range []string{
		"| W1: 1 node | 100/s / 1000/s | 10.00x | 0 / 0 | 4.00ms / 1.00ms | 20 B / 50 B | 100.0 MiB / 1.0 MiB |",
		"| raw etcd compare-and-swap, 1 client | 2000/s | calico W1 = 0.05x of it, ipkeeper W1 = 0.50x of it |",
		"| 10 pods | - / 1.00ms | - / 50 B | - / 0 |",
		"| 2000 pods | - / 1.00ms | - / 50 B | 5 / 0 |",
		"ipkeeper, 2000 pods over 10 pods: ADD p50 1.00x, bytes per ADD 1.00x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "calico, 2000 pods") {
		t.Errorf("a side without density rows got a flatness line:\n%s", out)
	}
}
