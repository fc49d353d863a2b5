// Package calico reads Calico IPAM state — AllocationBlocks, handles and
// host affinities as Calico keeps them in etcd under /calico/ipam/v2/ —
// and turns it into an importer.Plan.
package calico

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/importer"
)

// Prefix is where Calico keeps its IPAM state in etcd.
const Prefix = "/calico/ipam/v2/"

// KV is one entry of Calico's IPAM state. Key is relative to Prefix (a
// full key is accepted too) and may be empty when a file holds a bare
// value, whose kind is then told from its shape.
type KV struct {
	Key   string
	Value []byte
}

// ParseFile reads entries as etcdctl prints them: `etcdctl get --prefix
// /calico/ipam/v2/` (a key line, then a value line), `etcdctl get -w json`
// (base64 keys and values), or bare JSON values one after another (for
// example a block value saved on its own). Input over
// importer.MaxSourceBytes, or nesting deeper than importer.MaxNesting, is
// refused before any of it is decoded.
func ParseFile(data []byte) ([]KV, error) {
	if err := importer.CheckJSONSource("the etcdctl output", data); err != nil {
		return nil, err
	}
	var out []KV
	r := bufio.NewReader(bytes.NewReader(data))
	pending, havePending, line := "", false, 0
	flush := func(v []byte) {
		out = append(out, KV{Key: pending, Value: v})
		pending, havePending = "", false
	}
	for {
		c, err := skipSpace(r, &line)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if c == '{' || c == '[' || c == '"' {
			dec := json.NewDecoder(r)
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, fmt.Errorf("%w: line %d: %v", importer.ErrInvalidSource, line+1, err)
			}
			line += bytes.Count(raw, []byte("\n"))
			// The decoder may have read ahead: continue after the value.
			r = bufio.NewReader(io.MultiReader(dec.Buffered(), r))
			kvs, isList, err := etcdctlJSON(raw)
			switch {
			case err != nil:
				return nil, err
			case isList:
				out = append(out, kvs...)
			default:
				if raw[0] == '"' { // an empty etcd value printed as a JSON string
					raw = nil
				}
				flush(raw)
			}
			continue
		}
		text, err := r.ReadString('\n')
		line++
		text = strings.TrimSpace(text)
		if !strings.HasPrefix(text, "/") {
			return nil, fmt.Errorf("%w: line %d: %q is neither an etcd key nor a JSON value", importer.ErrInvalidSource, line, truncate(text))
		}
		if havePending { // the previous key had an empty value
			flush(nil)
		}
		pending, havePending = text, true
		if err == io.EOF {
			break
		}
	}
	if havePending {
		flush(nil)
	}
	return out, nil
}

// skipSpace skips white space, counting lines, and peeks at the next byte.
func skipSpace(r *bufio.Reader, line *int) (byte, error) {
	for {
		b, err := r.Peek(1)
		if err != nil {
			return 0, err
		}
		switch b[0] {
		case '\n':
			*line++
			fallthrough
		case ' ', '\t', '\r':
			_, _ = r.ReadByte()
		default:
			return b[0], nil
		}
	}
}

// etcdctlJSON decodes `etcdctl get -w json` output; isList is false when
// raw is not such an object.
func etcdctlJSON(raw json.RawMessage) ([]KV, bool, error) {
	var resp struct {
		KVs *[]struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"kvs"`
		Header json.RawMessage `json:"header"`
	}
	if raw[0] != '{' || json.Unmarshal(raw, &resp) != nil || resp.KVs == nil || resp.Header == nil {
		return nil, false, nil
	}
	var out []KV
	for i, e := range *resp.KVs {
		k, err1 := base64.StdEncoding.DecodeString(e.Key)
		v, err2 := base64.StdEncoding.DecodeString(e.Value)
		if err1 != nil || err2 != nil {
			return nil, true, fmt.Errorf("%w: kvs[%d] is not base64", importer.ErrInvalidSource, i)
		}
		out = append(out, KV{Key: string(k), Value: v})
	}
	return out, true, nil
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
