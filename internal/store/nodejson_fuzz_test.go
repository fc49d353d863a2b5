package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzNodeSpecJSON compares the node object codecs with encoding/json:
// whatever parseNodeSpec accepts, json.Unmarshal must accept and decode
// to the same NodeSpec; whatever NodeSpec json.Unmarshal makes of the
// input (even when it fails half-way), appendNodeSpec must write what
// json.Marshal does, or fail as it does.
//
//	go test -run '^$' -fuzz FuzzNodeSpecJSON -fuzztime 2m ./internal/store/
func FuzzNodeSpecJSON(f *testing.F) {
	for _, c := range testSpecs(f) {
		if data, err := json.Marshal(c.spec); err == nil {
			f.Add(data)
			indented, _ := json.MarshalIndent(c.spec, " ", "\t")
			f.Add(indented)
		}
	}
	for _, s := range []string{
		`{"handles":[{"ips":[{"pool":"v6","addr":"fd00::1"}],"created":"2026-11-23T12:00:00.5+02:00","podUID":"u","pod":"p","namespace":"n","netns":"/n","node":"b","attachment":["a","b","c"],"id":"x"}],"blocks":[{"free":"0-63","cidr":"fd00::/122","pool":"v6"}],"loans":[{"lender":"c","handle":"x"}]}`,
		`{"blocks":[{"pool":"v4","cidr":"10.0.0.0/26","free":"1-63"}],"handles":[{"id":"k\u0038s","ips":[{"addr":"10.0.0.0","pool":"v4"}]}]}`,
		`{"blocks":[{"pool":"v4","cidr":"10.0.0.0/26","free":"1-63"}],"handles":[{"id":"ç\u2028<>&","ips":[]}]}`,
		`{"Blocks":[{"POOL":"v4","Cidr":"10.0.0.0/26"}],"hAndles":[{"ID":"x","PodUid":"u"}]}`,
		`{"blocks":[{"pool":"v4"}],"blocks":[{"cidr":"10.0.0.0/26"}]}`,
		`{"handles":[{"id":"x","attachment":["a"],"attachment":["b","c","d","e"]}]}`,
		`{"blocks":null,"handles":[null,{"id":null,"created":null,"ips":[null]}],"loans":null}`,
		`{"handles":[{"id":"x","created":"10000-01-01T00:00:00Z"}]}`,
		`{"handles":[{"id":"x","sticky":"pod/db/pg-0","created":"2026-11-23T12:00:00Z","parked":"2026-11-24T12:00:00.5+02:00","ips":[]}]}`,
		`{"handles":[{"id":"x","created":"0000-01-01T00:00:00+23:59"}]}`,
		`{"handles":[{"id":"x","created":"0001-01-01T00:00:00Z"}]} `,
		`{"handles":[{"id":"x","created":"0001-01-01T01:00:00+01:00"}]}`,
		`{"handles":[{"id":"x","ips":[{"addr":"fe80::1%<eth0>","pool":"v6"}]}]}`,
		`{"blocks":[{"pool":"v4","cidr":"::ffff:10.0.0.0/120","free":""}]}`,
		`{"blocks":[],"handles":[]}x`,
		"\xef\xbb\xbf{}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want NodeSpec
		_ = json.Unmarshal(data, &want)
		checkParse(t, data)
		enc, encErr := appendNodeSpec(nil, &want)
		std, stdErr := json.Marshal(want)
		if (encErr == nil) != (stdErr == nil) || encErr != nil && encErr.Error() != stdErr.Error() {
			t.Fatalf("appendNodeSpec error %v, json.Marshal's %v", encErr, stdErr)
		}
		if !bytes.Equal(enc, std) {
			t.Fatalf("appendNodeSpec wrote\n%s\njson.Marshal\n%s", enc, std)
		}
		if stdErr == nil {
			// Whatever the fuzzer's input made, in the form parseNodeSpec
			// reads (when its strings are plain): the input itself
			// rarely is.
			checkParse(t, std)
		}
	})
}

// checkParse fails t when parseNodeSpec accepts data and json.Unmarshal
// does not, or decodes it otherwise. It returns whether parseNodeSpec
// accepted.
func checkParse(t *testing.T, data []byte) bool {
	t.Helper()
	got, ok := parseNodeSpec(data)
	if !ok {
		return false
	}
	var want NodeSpec
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("parseNodeSpec accepts %q, json.Unmarshal fails: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseNodeSpec(%q)\n = %#v\njson.Unmarshal\n = %#v", data, got, want)
	}
	return true
}
