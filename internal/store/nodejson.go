package store

import (
	"encoding/json"
	"time"
)

// A node object is decoded and encoded once per plugin ADD on etcd, and
// encoding/json's reflection was most of the cost of both. appendNodeSpec
// and parseNodeSpec (nodejsondecode.go) are hand-written for NodeSpec;
// their results are those of encoding/json, byte for byte and value for
// value (FuzzNodeSpecJSON compares them). Neither is a method of NodeSpec:
// the Kubernetes backend embeds NodeSpec in its wire struct, where a
// promoted MarshalJSON or UnmarshalJSON would replace that struct's
// encoding.

// appendNodeSpec appends json.Marshal(spec) to dst, or returns the error
// json.Marshal returns (only a Created time RFC 3339 cannot spell, whose
// year is outside [0, 9999], fails).
func appendNodeSpec(dst []byte, spec *NodeSpec) ([]byte, error) {
	out, ok := appendNodeSpecFast(dst, spec)
	if ok {
		return out, nil
	}
	// Something the fast path does not write: let encoding/json write it,
	// or say why it cannot.
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return append(dst, data...), nil
}

// appendNodeSpecFast is appendNodeSpec without the fallback: false when a
// Created time does not encode.
func appendNodeSpecFast(dst []byte, spec *NodeSpec) ([]byte, bool) {
	dst = append(dst, `{"blocks":`...)
	if spec.Blocks == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range spec.Blocks {
			b := &spec.Blocks[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"pool":`...)
			dst = appendJSONString(dst, b.Pool)
			dst = append(dst, `,"cidr":`...)
			mark := len(dst)
			dst = append(dst, '"')
			dst, _ = b.CIDR.AppendText(dst) // never fails
			dst = closeTextString(dst, mark)
			dst = append(dst, `,"free":`...)
			dst = appendJSONString(dst, b.Free)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"handles":`...)
	if spec.Handles == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range spec.Handles {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = appendHandleSpec(dst, &spec.Handles[i]); !ok {
				return dst, false
			}
		}
		dst = append(dst, ']')
	}
	if len(spec.Loans) > 0 {
		dst = append(dst, `,"loans":[`...)
		for i, l := range spec.Loans {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"handle":`...)
			dst = appendJSONString(dst, l.Handle)
			dst = append(dst, `,"lender":`...)
			dst = appendJSONString(dst, l.Lender)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), true
}

// appendHandleSpec appends the JSON of one handle record, fields in
// declaration order, omitempty and omitzero as their tags say.
func appendHandleSpec(dst []byte, h *HandleSpec) ([]byte, bool) {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, h.ID)
	if h.Attachment != nil {
		dst = append(dst, `,"attachment":[`...)
		dst = appendJSONString(dst, h.Attachment[0])
		dst = append(dst, ',')
		dst = appendJSONString(dst, h.Attachment[1])
		dst = append(dst, ',')
		dst = appendJSONString(dst, h.Attachment[2])
		dst = append(dst, ']')
	}
	for _, f := range [...]struct{ key, val string }{
		{`,"node":`, h.Node}, {`,"netns":`, h.NetNS}, {`,"namespace":`, h.Namespace},
		{`,"pod":`, h.Pod}, {`,"podUID":`, h.PodUID}, {`,"sticky":`, h.Sticky},
	} {
		if f.val != "" {
			dst = append(dst, f.key...)
			dst = appendJSONString(dst, f.val)
		}
	}
	if !h.Created.IsZero() {
		var ok bool
		if dst, ok = appendTime(append(dst, `,"created":`...), h.Created); !ok {
			return dst, false
		}
	}
	if !h.Parked.IsZero() {
		var ok bool
		if dst, ok = appendTime(append(dst, `,"parked":`...), h.Parked); !ok {
			return dst, false
		}
	}
	dst = append(dst, `,"ips":`...)
	if h.IPs == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for j, a := range h.IPs {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"addr":`...)
			mark := len(dst)
			dst = append(dst, '"')
			dst, _ = a.Addr.AppendText(dst) // never fails
			dst = closeTextString(dst, mark)
			dst = append(dst, `,"pool":`...)
			dst = appendJSONString(dst, a.Pool)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), true
}

// appendTime appends what time.Time.MarshalJSON returns, as encoding/json
// writes it (its characters need no escaping), or false when t has no
// RFC 3339 spelling.
func appendTime(dst []byte, t time.Time) ([]byte, bool) {
	out, err := t.AppendText(append(dst, '"'))
	if err != nil {
		return dst, false
	}
	return append(out, '"'), true
}

// closeTextString ends the JSON string whose opening quote is dst[mark]
// and whose unescaped text follows it: when the text needs escaping (a
// zone of an address may hold anything) it is written again, escaped.
func closeTextString(dst []byte, mark int) []byte {
	for _, c := range dst[mark+1:] {
		if !jsonPlain[c] {
			text := string(dst[mark+1:])
			return appendJSONString(dst[:mark], text)
		}
	}
	return append(dst, '"')
}

// appendJSONString appends s as encoding/json quotes it: strings of plain
// characters (jsonPlain) as they are, any other string as json.Marshal
// writes it, which is exact for HTML escapes, invalid UTF-8, U+2028/9 and
// control characters alike.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !jsonPlain[s[i]] {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// jsonPlain holds the bytes encoding/json writes in a string as they are
// and that parseNodeSpec reads without unescaping: printable ASCII but
// '"', '\\' and the HTML-escaped '<', '>' and '&'.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// nodeSpecSizeHint is about the length of spec's JSON, to allocate its
// buffer once: a block is some 60 bytes, a handle record with every field
// and two addresses some 330.
func nodeSpecSizeHint(spec *NodeSpec) int {
	return 64 + 64*len(spec.Blocks) + 340*len(spec.Handles) + 64*len(spec.Loans)
}
