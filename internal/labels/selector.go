// Package labels parses and evaluates the Kubernetes label selector syntax
// used by pool node selectors: "k=v", "k==v", "k!=v", "k in (a,b)",
// "k notin (a,b)", "k", "!k", joined by commas. An empty selector (or
// "all()", as Calico writes it) selects everything.
//
// It is not k8s.io/apimachinery/pkg/labels because the allocator, and so
// the plugin binary that a container runtime execs for every ADD and DEL,
// evaluates pool node selectors: apimachinery's package brings klog and
// apimachinery's validation (about 20 packages, with their package
// initialisation) into a binary whose only Kubernetes dependency is
// otherwise sigs.k8s.io/yaml. Measured, that made every plugin exec
// slower and the binary larger (docs/BENCHMARKS.md, "Plugin process
// costs"). A selector both parse selects the same nodes with either. This
// one refuses apimachinery's "gt" and "lt", and does not hold keys and
// values to the syntax of Kubernetes labels: a value no label can carry
// ("k=a b") is accepted and equals no node's.
package labels

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrSyntax means a selector could not be parsed.
var ErrSyntax = errors.New("invalid label selector")

type op int

const (
	opEq op = iota
	opNe
	opIn
	opNotIn
	opExists
	opNotExists
)

type requirement struct {
	key    string
	op     op
	values []string
}

// Selector is a parsed label selector.
type Selector struct{ reqs []requirement }

// Parse parses s.
func Parse(s string) (Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all()" {
		return Selector{}, nil
	}
	var sel Selector
	for _, term := range splitTerms(s) {
		r, err := parseTerm(strings.TrimSpace(term))
		if err != nil {
			return Selector{}, fmt.Errorf("%w %q: %w", ErrSyntax, s, err)
		}
		sel.reqs = append(sel.reqs, r)
	}
	return sel, nil
}

// splitTerms splits on commas outside parentheses.
func splitTerms(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseTerm(t string) (requirement, error) {
	if t == "" {
		return requirement{}, errors.New("empty term")
	}
	if k, ok := strings.CutPrefix(t, "!"); ok {
		k = strings.TrimSpace(k)
		return requirement{key: k, op: opNotExists}, checkKey(k)
	}
	for _, sep := range []struct {
		s  string
		op op
	}{{"!=", opNe}, {"==", opEq}, {"=", opEq}} {
		if k, v, ok := strings.Cut(t, sep.s); ok {
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			return requirement{key: k, op: sep.op, values: []string{v}}, checkKey(k)
		}
	}
	// "k in(a,b)" is valid Kubernetes syntax: the list needs no space.
	fields := strings.Fields(strings.Replace(t, "(", " (", 1))
	if len(fields) == 1 {
		return requirement{key: fields[0], op: opExists}, checkKey(fields[0])
	}
	if len(fields) < 3 {
		return requirement{}, fmt.Errorf("cannot parse %q", t)
	}
	var o op
	switch fields[1] {
	case "in":
		o = opIn
	case "notin":
		o = opNotIn
	default:
		return requirement{}, fmt.Errorf("unknown operator %q in %q", fields[1], t)
	}
	list := strings.TrimSpace(strings.Join(fields[2:], " "))
	if !strings.HasPrefix(list, "(") || !strings.HasSuffix(list, ")") {
		return requirement{}, fmt.Errorf("%q: values must be in parentheses", t)
	}
	var vals []string
	for v := range strings.SplitSeq(list[1:len(list)-1], ",") {
		vals = append(vals, strings.TrimSpace(v))
	}
	return requirement{key: fields[0], op: o, values: vals}, checkKey(fields[0])
}

func checkKey(k string) error {
	if k == "" || strings.ContainsAny(k, " ()=!,") {
		return fmt.Errorf("invalid key %q", k)
	}
	return nil
}

// Matches reports whether the labels satisfy every requirement.
func (s Selector) Matches(l map[string]string) bool {
	for _, r := range s.reqs {
		v, has := l[r.key]
		var ok bool
		switch r.op {
		case opEq:
			ok = has && v == r.values[0]
		case opNe:
			ok = !has || v != r.values[0]
		case opIn:
			ok = has && slices.Contains(r.values, v)
		case opNotIn:
			ok = !has || !slices.Contains(r.values, v)
		case opExists:
			ok = has
		case opNotExists:
			ok = !has
		}
		if !ok {
			return false
		}
	}
	return true
}
