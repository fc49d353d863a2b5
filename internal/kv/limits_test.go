package kv

import (
	"strings"
	"testing"
)

func TestLimitsFits(t *testing.T) {
	lim := Limits{MaxOps: 2, MaxKeyBytes: 4, MaxValueBytes: 3, MaxTxnBytes: 10}
	for _, c := range []struct {
		name  string
		conds []Cond
		ops   []Op
		fits  bool
	}{
		{"empty", nil, nil, true},
		{"at every limit", []Cond{{Key: "a"}, {Key: "b"}}, []Op{{Key: "kkkk", Value: []byte("vvv")}, {Key: "x", Delete: true}}, true},
		{"one condition too many", []Cond{{Key: "a"}, {Key: "b"}, {Key: "c"}}, nil, false},
		{"a value condition counts twice", []Cond{{Key: "a"}, {Key: "b", Value: []byte("v")}}, nil, false},
		{"one operation too many", nil, []Op{{Key: "a"}, {Key: "b"}, {Key: "c"}}, false},
		{"key too long", nil, []Op{{Key: "kkkkk"}}, false},
		{"value too large", nil, []Op{{Key: "k", Value: []byte("vvvv")}}, false},
		{"too many bytes in all", []Cond{{Key: "cccc"}}, []Op{{Key: "kkkk", Value: []byte("vvv")}}, false},
	} {
		if got := lim.Fits(c.conds, c.ops); got != c.fits {
			t.Errorf("%s: Fits = %v, want %v", c.name, got, c.fits)
		}
	}
	if !(Limits{}).Fits([]Cond{{Key: strings.Repeat("k", 1<<20)}}, make([]Op, 10000)) {
		t.Error("zero Limits limit something")
	}
	if n := TxnBytes([]Cond{{Key: "ab", Value: []byte("xyz")}}, []Op{{Key: "k", Value: []byte("v")}}); n != 2+2+3+1+1 {
		t.Errorf("TxnBytes = %d", n)
	}
}
