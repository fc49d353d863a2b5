package importer

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// indented nests n mappings by indentation ("a:\n  a:\n    a: x").
func indented(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.Repeat("  ", i) + "a:\n")
	}
	b.WriteString(strings.Repeat("  ", n) + "x\n")
	return b.String()
}

// seqUnderKeys nests n sequences, each at its key's indentation
// ("a:\n- a:\n  - a:\n").
func seqUnderKeys(n int) string {
	var b strings.Builder
	b.WriteString("a:\n")
	for i := range n {
		b.WriteString(strings.Repeat("  ", i) + "- a:\n")
	}
	return b.String()
}

// deepDocuments nest far deeper than MaxNesting in the ways YAML allows.
var deepDocuments = map[string]string{
	"flow sequences":         strings.Repeat("[", 65000) + strings.Repeat("]", 65000),
	"flow mappings":          strings.Repeat("{a: ", 1000) + strings.Repeat("}", 1000),
	"compact sequences":      strings.Repeat("- ", 65000) + "x\n",
	"indented mappings":      indented(MaxNesting + 1),
	"sequences under keys":   seqUnderKeys(MaxNesting/2 + 1),
	"flow after a block":     "items:\n- spec:\n    allocations: " + strings.Repeat("[", 200) + strings.Repeat("]", 200) + "\n",
	"flow over lines":        "a: [\n" + strings.Repeat("  [\n", 100) + strings.Repeat("  ]\n", 100) + "]\n",
	"after a document start": "--- " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "\n",
	"after a quoted scalar":  "a: 'it''s'\nb: " + strings.Repeat("[", 100) + "\n",
	"after a plain quote":    "a: it's\nb: " + strings.Repeat("[", 100) + "\n",
	"after a comment":        "a: b # it's\nc: " + strings.Repeat("{", 100) + "\n",
	"after a block scalar":   "a: |\n  [[[[\nb: " + strings.Repeat("[", 100) + "\n",
	"plain scalar in flow":   "[a\n'b, " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + ", c']\n",
	"JSON":                   `{"items": ` + strings.Repeat(`[{"a": `, 50) + "1" + strings.Repeat("}]", 50) + "}",
	"JSON key without blank": `{"a":` + strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 101),
	"anchored":               "a: &x " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "\n",
	"tagged":                 "a: !!seq " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "\n",
}

// TestCheckNestingRefusesDeepDocuments: every deep document is refused
// with ErrSourceLimit (and ErrInvalidSource), the error naming the input,
// its line and the limit.
func TestCheckNestingRefusesDeepDocuments(t *testing.T) {
	for name, doc := range deepDocuments {
		err := CheckNesting("deep.yaml", []byte(doc))
		if !errors.Is(err, ErrSourceLimit) || !errors.Is(err, ErrInvalidSource) {
			t.Errorf("%s: %v, want ErrSourceLimit", name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "deep.yaml, line ") || !strings.Contains(msg, fmt.Sprintf("more than %d levels", MaxNesting)) {
			t.Errorf("%s: %q does not name the input, the line and the limit", name, msg)
		}
	}
}

// TestCheckNestingPassesImportedObjects: what kubectl and etcdctl print
// passes well within the limit — deep brackets inside quoted and block
// scalars (a NetworkAttachmentDefinition's CNI config) are text.
func TestCheckNestingPassesImportedObjects(t *testing.T) {
	docs := map[string]string{
		"quoted brackets":       "a: '" + strings.Repeat("[", 500) + "'\nb: \"" + strings.Repeat("{\\\"", 500) + "\"\n",
		"block scalar brackets": "config: |\n  " + strings.Repeat("[", 500) + "\n    " + strings.Repeat("{", 500) + "\nnext: 1\n",
		"folded, explicit":      "- >2-\n    " + strings.Repeat("[", 500) + "\n- x\n",
		"plain over lines":      "a: one [\n  two [[[\n  three {{{\nb: c\n",
		"comment brackets":      "a: 1 # " + strings.Repeat("[", 500) + "\n# " + strings.Repeat("{", 500) + "\n",
	}
	for _, f := range []string{"whereabouts-ippools.yaml", "network-attachment-definition.yaml", "calico-block-100.112.209.128-26.json"} {
		b, err := os.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(b)
	}
	for name, doc := range docs {
		if depth, _ := deepest([]byte(doc), math.MaxInt); depth > 16 {
			t.Errorf("%s: nesting counted %d, want it far below the limit of %d", name, depth, MaxNesting)
		}
		if err := CheckSource(name, []byte(doc)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCheckSourceSize: an input over MaxSourceBytes is refused by its
// size alone.
func TestCheckSourceSize(t *testing.T) {
	big := make([]byte, MaxSourceBytes+1)
	err := CheckSource("big.yaml", big)
	if !errors.Is(err, ErrSourceLimit) || !strings.Contains(err.Error(), fmt.Sprintf("limit of %d", MaxSourceBytes)) {
		t.Fatalf("%d bytes: %v, want ErrSourceLimit naming the limit", len(big), err)
	}
}

// depthOf is how deeply the collections of a decoded value nest.
func depthOf(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	case []any:
		for _, e := range v {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}

// FuzzCheckNesting: whatever the decoder the importers use accepts nests
// no deeper than CheckNesting counts (aliases and merge keys aside: they
// repeat nodes the parser has already read, without nesting its input).
func FuzzCheckNesting(f *testing.F) {
	for _, doc := range deepDocuments {
		if len(doc) < 2000 {
			f.Add(doc)
		}
	}
	for _, doc := range []string{indented(5), seqUnderKeys(5), "a: [b, {c: d}]\n", "- - - x\n", "? - a\n: - b\n",
		"a: |\n  x\n b: [c]\n", "\"a\":\n- [x]\n", "a:\n  - b: >\n      text\n    c: [d]\n", "- 'x\n  [y'\n- [z]\n"} {
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if len(doc) > 4096 || strings.ContainsAny(doc, "*") || strings.Contains(doc, "<<") {
			return
		}
		var v any
		if yaml.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		if got, _ := deepest([]byte(doc), math.MaxInt); got < depthOf(v) {
			t.Fatalf("counted %d levels of nesting in %q, which decodes %d deep: %#v", got, doc, depthOf(v), v)
		}
	})
}

// TestCheckJSONSource: in etcdctl's output only the JSON values' arrays
// and objects count — not brackets in strings (escaped quotes included)
// nor in the key lines between values.
func TestCheckJSONSource(t *testing.T) {
	calico, err := os.ReadFile("testdata/calico-block-100.112.209.128-26.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{
		"block":             string(calico),
		"string brackets":   `{"a": "` + strings.Repeat(`[\"{`, 500) + `"}`,
		"key line brackets": "/calico/ipam/v2/handle/" + strings.Repeat("[", 500) + "\n{\"a\": 1}\n",
	} {
		if err := CheckJSONSource(name, []byte(doc)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	deep := "/calico/ipam/v2/x\n{\"a\": \"]]]\"}\n/calico/ipam/v2/y\n" + strings.Repeat(`{"a": [`, MaxNesting) + "1" + strings.Repeat("]}", MaxNesting)
	if err := CheckJSONSource("dump", []byte(deep)); !errors.Is(err, ErrSourceLimit) || !strings.Contains(err.Error(), "dump, line 4") {
		t.Fatalf("a value nested %d deep: %v, want ErrSourceLimit naming line 4", 2*MaxNesting, err)
	}
}
