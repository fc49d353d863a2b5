package labels_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/labels"
)

func TestParseMatches(t *testing.T) {
	type L = map[string]string
	zoneA := L{"zone": "a", "role": "worker"}
	zoneB := L{"zone": "b"}
	zoneEmpty := L{"zone": ""}
	none := L{}

	tests := []struct {
		sel string
		// match and noMatch are label sets the selector must and must not
		// select.
		match, noMatch []L
	}{
		{"", []L{zoneA, none, nil}, nil},
		{"   ", []L{zoneA, none, nil}, nil},
		{"all()", []L{zoneA, none, nil}, nil},
		{" all() ", []L{zoneA, none}, nil},
		{"zone=a", []L{zoneA}, []L{zoneB, zoneEmpty, none, nil}},
		{"zone==a", []L{zoneA}, []L{zoneB, none}},
		{" zone = a ", []L{zoneA}, []L{zoneB, none}},
		{"zone=", []L{zoneEmpty}, []L{zoneA, none}},
		{"zone!=a", []L{zoneB, zoneEmpty, none, nil}, []L{zoneA}},
		{"zone in (a,b)", []L{zoneA, zoneB}, []L{zoneEmpty, none, nil}},
		{"zone in ( a , b )", []L{zoneA, zoneB}, []L{none}},
		{"zone in (b)", []L{zoneB}, []L{zoneA, none}},
		{"zone in(a,b)", []L{zoneA, zoneB}, []L{none}},
		{"zone notin(a)", []L{zoneB, none}, []L{zoneA}},
		{"zone in ()", []L{zoneEmpty}, []L{zoneA, none}},
		{"zone notin (a,b)", []L{zoneEmpty, none, nil}, []L{zoneA, zoneB}},
		{"zone", []L{zoneA, zoneB, zoneEmpty}, []L{none, nil}},
		{"!zone", []L{none, nil, {"role": "worker"}}, []L{zoneA, zoneEmpty}},
		{"! zone", []L{none}, []L{zoneA}},
		{"zone=a,role=worker", []L{zoneA}, []L{{"zone": "a"}, {"role": "worker"}}},
		{"zone in (a,b), !role", []L{zoneB}, []L{zoneA, none}},
		{"zone notin (b),role", []L{zoneA, {"role": "x"}}, []L{zoneB, none, {"zone": "b", "role": "x"}}},
		{"kubernetes.io/hostname=node-1", []L{{"kubernetes.io/hostname": "node-1"}}, []L{{"kubernetes.io/hostname": "node-2"}}},
		{"example.com/gpu!=true,topology.kubernetes.io/zone in (eu-1a, eu-1b)",
			[]L{{"topology.kubernetes.io/zone": "eu-1b"}}, []L{{"topology.kubernetes.io/zone": "eu-1b", "example.com/gpu": "true"}, none}},
	}
	for _, tt := range tests {
		t.Run(tt.sel, func(t *testing.T) {
			sel, err := labels.Parse(tt.sel)
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tt.sel, err)
			}
			for _, l := range tt.match {
				if !sel.Matches(l) {
					t.Errorf("%q does not select %v", tt.sel, l)
				}
			}
			for _, l := range tt.noMatch {
				if sel.Matches(l) {
					t.Errorf("%q selects %v", tt.sel, l)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ sel, msg string }{
		{",", "empty term"},
		{"zone=a,", "empty term"},
		{"zone=a,,role=x", "empty term"},
		{"=a", "invalid key"},
		{"!=a", "invalid key"},
		{"!", "invalid key"},
		{"!zone=a", "invalid key"},
		{"zone a", "cannot parse"},
		{"zone in", "cannot parse"},
		{"zone in a,b", "parentheses"},
		{"zone in (a,b", "parentheses"},
		{"zone notin a", "parentheses"},
		{"zone is (a)", "unknown operator"},
		{"zone > 1", "unknown operator"},
		{"(zone)", "invalid key"},
		{"zo ne=a", "invalid key"},
		{"a,b)", "invalid key"},
	}
	for _, tt := range tests {
		t.Run(tt.sel, func(t *testing.T) {
			sel, err := labels.Parse(tt.sel)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", tt.sel, sel)
			}
			if !errors.Is(err, labels.ErrSyntax) {
				t.Errorf("Parse(%q) = %v, does not wrap ErrSyntax", tt.sel, err)
			}
			if !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), tt.sel) {
				t.Errorf("Parse(%q) = %q, want it to quote the selector and say %q", tt.sel, err, tt.msg)
			}
		})
	}
}

// FuzzParse checks that Parse never panics, that a parsed selector can be
// evaluated on any labels, and that parsing is stable under surrounding
// whitespace.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "all()", "a=b", "a==b", "a!=b", "a in (x,y)", "a notin (x)", "a", "!a",
		"a=b,c in (d),!e", "a in (", "a in ()", ")(", "!", ",", "a in (b,(c))", "a=b=c"} {
		f.Add(s, "a", "b")
	}
	f.Fuzz(func(t *testing.T, s, k, v string) {
		sel, err := labels.Parse(s)
		if err != nil {
			if !errors.Is(err, labels.ErrSyntax) {
				t.Fatalf("Parse(%q) = %v, does not wrap ErrSyntax", s, err)
			}
			return
		}
		l := map[string]string{k: v}
		got := sel.Matches(l)
		sel.Matches(nil)
		sel2, err := labels.Parse(" " + s + "\t")
		if err != nil {
			t.Fatalf("Parse(%q) ok but with whitespace around: %v", s, err)
		}
		if sel2.Matches(l) != got {
			t.Fatalf("Parse(%q) and with whitespace around disagree on %v", s, l)
		}
	})
}
