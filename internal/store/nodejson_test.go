package store

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// checkEncode fails t unless appendNodeSpec writes what json.Marshal
// does, byte for byte, or fails as it does.
func checkEncode(t *testing.T, spec NodeSpec) {
	t.Helper()
	want, wantErr := json.Marshal(spec)
	prefix := []byte("prefix")
	got, err := appendNodeSpec(prefix, &spec)
	switch {
	case (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error():
		t.Fatalf("appendNodeSpec error %v, json.Marshal's %v", err, wantErr)
	case err == nil && !bytes.Equal(got, append(prefix, want...)):
		t.Fatalf("appendNodeSpec wrote\n%s\njson.Marshal\n%s", got, want)
	}
}

// checkDecode is checkParse, failing t also when parseNodeSpec declines
// data and wantOK. It returns whether parseNodeSpec accepted.
func checkDecode(t *testing.T, data []byte, wantOK bool) bool {
	t.Helper()
	ok := checkParse(t, data)
	if wantOK && !ok {
		t.Fatalf("parseNodeSpec declines %s", data)
	}
	return ok
}

// testSpecs are node objects of each family, a dual-stack one and the
// corner cases of encoding/json: nil and empty slices, zero values,
// strings it escapes, times it cannot encode. plain says the encoding
// is of the form parseNodeSpec reads.
func testSpecs(t testing.TB) []struct {
	name  string
	spec  NodeSpec
	plain bool
} {
	created := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	east := time.Date(2026, 11, 23, 14, 0, 0, 123456789, time.FixedZone("", 2*3600))
	pod := func(id string, ips ...AddrSpec) HandleSpec {
		return HandleSpec{ID: id, NetNS: "/var/run/netns/cni-1", Namespace: "default", Pod: "web-0",
			PodUID: "6f0c7e1a-2b1d-4c55-9e0a-1", Created: created, IPs: ips}
	}
	v4 := func(a string) AddrSpec { return AddrSpec{Addr: netip.MustParseAddr(a), Pool: "v4"} }
	v6 := func(a string) AddrSpec { return AddrSpec{Addr: netip.MustParseAddr(a), Pool: "v6"} }
	block4 := BlockSpec{Pool: "v4", CIDR: netip.MustParsePrefix("10.0.0.0/26"), Free: "3-63,0"}
	block6 := BlockSpec{Pool: "v6", CIDR: netip.MustParsePrefix("fd00::/122"), Free: "3-63,0"}
	borrowed := func(h HandleSpec) HandleSpec { h.Node = "node-b"; return h }
	attached := func(h HandleSpec) HandleSpec { h.Attachment = &[3]string{"k8s-pod-network", "c3", "eth0"}; return h }
	at := func(h HandleSpec, t time.Time) HandleSpec { h.Created = t; return h }
	loans := []LoanSpec{{Handle: "k8s.c4.eth0", Lender: "node-c"}, {Handle: "k8s.c5.eth0", Lender: "node-d"}}
	withStr := func(s string) NodeSpec {
		return NodeSpec{Blocks: []BlockSpec{{Pool: s, Free: s}}, Handles: []HandleSpec{{ID: s, Attachment: &[3]string{s, s, s},
			Node: s, NetNS: s, Namespace: s, Pod: s, PodUID: s, IPs: []AddrSpec{{Pool: s}}}}, Loans: []LoanSpec{{s, s}}}
	}
	dual, err := EncodeNode(codecNode(t, 30))
	if err != nil {
		t.Fatal(err)
	}
	return []struct {
		name  string
		spec  NodeSpec
		plain bool
	}{
		{"IPv4 node", NodeSpec{Blocks: []BlockSpec{block4}, Handles: []HandleSpec{pod("k8s.c1.eth0", v4("10.0.0.1")), borrowed(pod("k8s.c2.eth0", v4("10.0.0.2")))}, Loans: loans}, true},
		{"IPv6 node", NodeSpec{Blocks: []BlockSpec{block6}, Handles: []HandleSpec{pod("k8s.c1.eth0", v6("fd00::1")), borrowed(pod("k8s.c2.eth0", v6("fd00::2")))}, Loans: loans}, true},
		{"IPv4 attachment, no pod", NodeSpec{Blocks: []BlockSpec{block4}, Handles: []HandleSpec{attached(HandleSpec{ID: "k8s-pod-network.c3", IPs: []AddrSpec{v4("10.0.0.1")}})}}, true},
		{"IPv6 attachment, no pod", NodeSpec{Blocks: []BlockSpec{block6}, Handles: []HandleSpec{attached(HandleSpec{ID: "k8s-pod-network.c3", IPs: []AddrSpec{v6("fd00::1")}})}}, true},
		{"IPv4 offset time", NodeSpec{Blocks: []BlockSpec{block4}, Handles: []HandleSpec{at(pod("a", v4("10.0.0.1")), east)}}, true},
		{"IPv6 offset time", NodeSpec{Blocks: []BlockSpec{block6}, Handles: []HandleSpec{at(pod("a", v6("fd00::1")), east)}}, true},
		{"dual-stack", NodeSpec{Blocks: []BlockSpec{block4, block6}, Handles: []HandleSpec{pod("k8s.c1.eth0", v4("10.0.0.1"), v6("fd00::1"))}}, true},
		{"dual-stack, 30 pods", dual, true},
		{"empty node", NodeSpec{Blocks: []BlockSpec{}, Handles: []HandleSpec{}, Loans: []LoanSpec{}}, true},
		{"zero spec", NodeSpec{}, false},
		{"zero values", NodeSpec{Blocks: []BlockSpec{{}}, Handles: []HandleSpec{{IPs: []AddrSpec{{}}}, {}}, Loans: []LoanSpec{{}}}, false},
		{"IPv4 zero time in a zone", NodeSpec{Blocks: []BlockSpec{}, Handles: []HandleSpec{at(pod("a", v4("10.0.0.1")), time.Time{}.In(time.FixedZone("X", 3600)))}}, true},
		{"IPv6 zero time in a zone", NodeSpec{Blocks: []BlockSpec{}, Handles: []HandleSpec{at(pod("a", v6("fd00::1")), time.Time{}.In(time.FixedZone("X", 3600)))}}, true},
		{"IPv4 year 10000", NodeSpec{Handles: []HandleSpec{at(pod("a", v4("10.0.0.1")), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}}, false},
		{"IPv4 offset of 25 hours", NodeSpec{Handles: []HandleSpec{at(pod("a", v4("10.0.0.1")), created.In(time.FixedZone("", 25*3600)))}}, false},
		{"IPv6 offset with seconds", NodeSpec{Blocks: []BlockSpec{}, Handles: []HandleSpec{at(pod("a", v6("fd00::1")), created.In(time.FixedZone("LMT", -75)))}}, true},
		{"IPv6 year -1", NodeSpec{Handles: []HandleSpec{at(pod("a", v6("fd00::1")), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC))}}, false},
		{"IPv4-mapped IPv6", NodeSpec{Blocks: []BlockSpec{}, Handles: []HandleSpec{pod("a", v6("::ffff:10.0.0.1"))}}, true},
		{"IPv6 zone", NodeSpec{Blocks: []BlockSpec{}, Handles: []HandleSpec{pod("a", v6("fe80::1%eth0"))}}, true},
		{"IPv6 zone to escape", NodeSpec{Handles: []HandleSpec{pod("a", v6("fe80::1%<eth0>&\"\\"))}}, false},
		{"invalid prefix", NodeSpec{Blocks: []BlockSpec{{CIDR: netip.PrefixFrom(netip.MustParseAddr("10.0.0.0"), 40)}}}, false},
		{"HTML", withStr("<pod>&co"), false},
		{"quote and backslash", withStr(`a"b\c`), false},
		{"control characters", withStr("a\x00\x01\n\t\x1f\x7f"), false},
		{"non-ASCII", withStr("naïve 日本"), false},
		{"invalid UTF-8", withStr("a\xffb\xc3"), false},
		{"line separators", withStr("a\u2028b\u2029"), false},
	}
}

func TestNodeSpecJSONMatchesEncodingJSON(t *testing.T) {
	for _, c := range testSpecs(t) {
		t.Run(c.name, func(t *testing.T) {
			checkEncode(t, c.spec)
			if data, err := json.Marshal(c.spec); err == nil {
				checkDecode(t, data, c.plain)
				indented, _ := json.MarshalIndent(c.spec, "", "\t")
				checkDecode(t, indented, c.plain)
			}
		})
	}
}

// Outcomes of parseNodeSpec a case requires: it must accept, must
// decline, or may do either (when it accepts, it must agree with
// json.Unmarshal all the same).
const (
	accept = iota
	decline
	either
)

func TestParseNodeSpec(t *testing.T) {
	// base is a node object of one block and one record; {P}, {C} and {A}
	// are its pool, CIDR and address, of IPv4 or IPv6.
	const base = `{"blocks":[{"pool":"{P}","cidr":"{C}","free":"1-63"}],"handles":[{"id":"k8s.c1.eth0","ips":[{"addr":"{A}","pool":"{P}"}]}]}`
	families := []*strings.Replacer{
		strings.NewReplacer("{P}", "v4", "{C}", "10.0.0.0/26", "{A}", "10.0.0.0"),
		strings.NewReplacer("{P}", "v6", "{C}", "fd00::/122", "{A}", "fd00::"),
	}
	cases := []struct {
		name string
		// old is replaced by new in base, or new is the whole input
		// when old is "".
		old, new string
		want     int
	}{
		{"as written", `{"blocks"`, `{"blocks"`, accept},
		{"reordered keys", `{"pool":"{P}","cidr":"{C}","free":"1-63"}`, `{"free":"1-63","cidr":"{C}","pool":"{P}"}`, accept},
		{"reordered record", `{"id":"k8s.c1.eth0","ips":[{"addr":"{A}","pool":"{P}"}]}`, `{"ips":[{"pool":"{P}","addr":"{A}"}],"created":"2026-11-23T12:00:00Z","id":"k8s.c1.eth0"}`, accept},
		{"reordered members", `{"blocks":[`, `{"loans":[{"lender":"node-b","handle":"h"}],"blocks":[`, accept},
		{"whitespace", `,"`, " \t\r\n ,\n \"", accept},
		{"whitespace everywhere", `{"blocks":[{"pool":"{P}"`, " \n{ \"blocks\" : [ { \"pool\"\t:\r\"{P}\" ", accept},
		{"leading and trailing whitespace", "", " \n{\"blocks\":[],\"handles\":[]}\n\t ", accept},
		{"all fields", `"id":"k8s.c1.eth0"`, `"id":"x","attachment":["k8s","c1","eth0"],"node":"node-b","netns":"/run/netns/1","namespace":"ns","pod":"p","podUID":"u","created":"2026-11-23T12:00:00.5+02:00"`, accept},
		{"empty strings", `"id":"k8s.c1.eth0"`, `"id":"","attachment":["","",""],"node":"","netns":"","namespace":"","pod":"","podUID":""`, accept},
		{"attachment spaced", `"id":"k8s.c1.eth0"`, `"id":"x","attachment": [ "k8s" , "c1" , "eth0" ] `, accept},
		{"HTML characters", `"id":"k8s.c1.eth0"`, `"id":"<k8s>&"`, accept},
		{"empty object", "", `{}`, accept},
		{"empty arrays", "", `{"blocks":[],"handles":[],"loans":[]}`, accept},
		{"record without ips", "", `{"handles":[{"id":"x"}]}`, accept},
		{"record with empty ips", "", `{"handles":[{"id":"x","ips":[]},{"id":"y","ips":[{"addr":"{A}","pool":"{P}"}]},{"id":"z","ips":[ ]}]}`, accept},
		{"empty address and CIDR", "", `{"blocks":[{"pool":"{P}","cidr":"","free":""}],"handles":[{"id":"x","ips":[{"addr":"","pool":""}]}]}`, accept},
		{"empty objects", "", `{"blocks":[{}],"handles":[{"ips":[{}]}],"loans":[{}]}`, accept},
		{"zone", `"addr":"{A}"`, `"addr":"{A}%eth0"`, either},

		{"attachment of 2", `"id":"k8s.c1.eth0"`, `"id":"x","attachment":["k8s","c1"]`, decline},
		{"attachment of 4", `"id":"k8s.c1.eth0"`, `"id":"x","attachment":["k8s","c1","eth0","x"]`, decline},
		{"attachment empty", `"id":"k8s.c1.eth0"`, `"id":"x","attachment":[]`, decline},
		{"attachment null", `"id":"k8s.c1.eth0"`, `"id":"x","attachment":null`, decline},
		{"attachment of numbers", `"id":"k8s.c1.eth0"`, `"id":"x","attachment":[1,2,3]`, decline},
		{"attachment string", `"id":"k8s.c1.eth0"`, `"id":"x","attachment":"k8s"`, decline},
		{"created bad", `"id":"k8s.c1.eth0"`, `"id":"x","created":"2026-11-23"`, decline},
		{"created number", `"id":"k8s.c1.eth0"`, `"id":"x","created":0`, decline},
		{"created null", `"id":"k8s.c1.eth0"`, `"id":"x","created":null`, decline},
		{"blocks null", "", `{"blocks":null}`, decline},
		{"ips null", "", `{"handles":[{"id":"x","ips":null}]}`, decline},
		{"loans null", "", `{"loans":null}`, decline},
		{"string null", `"pool":"{P}","cidr"`, `"pool":null,"cidr"`, decline},
		{"element null", "", `{"blocks":[null]}`, decline},
		{"duplicate key", `"free":"1-63"`, `"free":"1-63","free":"0"`, decline},
		{"duplicate blocks", `{"blocks":[`, `{"blocks":[],"blocks":[`, decline},
		{"duplicate ips", `"pool":"{P}"}]}]}`, `"pool":"{P}"}],"ips":[]}]}`, decline},
		{"duplicate attachment", `"id":"k8s.c1.eth0"`, `"id":"x","attachment":["a","b","c"],"attachment":["a","b","c"]`, decline},
		{"upper-case key", `"blocks"`, `"Blocks"`, decline},
		{"mixed-case key", `"id"`, `"ID"`, decline},
		{"folded key", "", `{"handles":[{"id":"x","poduid":"u"}]}`, decline},
		{"unknown key", `"id":"k8s.c1.eth0"`, `"id":"k8s.c1.eth0","owner":"x"`, decline},
		{"unknown top-level key", `{"blocks"`, `{"owners":{},"blocks"`, decline},
		{"escaped key", `"id":"k8s.c1.eth0"`, `"\u0069d":"k8s.c1.eth0"`, decline},
		{"escape", `"id":"k8s.c1.eth0"`, `"id":"k8s.c1\u002eeth0"`, decline},
		{"escaped slash", `"id":"k8s.c1.eth0"`, `"id":"k8s\/c1"`, decline},
		{"control character", `"id":"k8s.c1.eth0"`, "\"id\":\"k8s\tc1\"", decline},
		{"non-ASCII", `"id":"k8s.c1.eth0"`, `"id":"k8s.ç1.eth0"`, decline},
		{"invalid UTF-8", `"id":"k8s.c1.eth0"`, "\"id\":\"k8s.\xff.eth0\"", decline},
		{"number", `"free":"1-63"`, `"free":163`, decline},
		{"bool", `"free":"1-63"`, `"free":true`, decline},
		{"object for array", "", `{"blocks":{}}`, decline},
		{"array for object", "", `{"blocks":[[]]}`, decline},
		{"bad CIDR", `"cidr":"{C}"`, `"cidr":"{A}/999"`, decline},
		{"bad address", `"addr":"{A}"`, `"addr":"{A}x"`, decline},
		{"trailing comma in array", `}]}]}`, `},]}]}`, decline},
		{"trailing comma in object", `"free":"1-63"}`, `"free":"1-63",}`, decline},
		{"leading comma", `{"blocks"`, `{,"blocks"`, decline},
		{"missing comma", `"cidr":"{C}",`, `"cidr":"{C}" `, decline},
		{"missing colon", `"free":`, `"free"`, decline},
		{"trailing garbage", `}]}]}`, `}]}]}x`, decline},
		{"trailing object", `}]}]}`, `}]}]}{}`, decline},
		{"BOM", `{"blocks"`, "\ufeff{\"blocks\"", decline},
		{"truncated", `}]}]}`, `}]}]`, decline},
		{"unterminated string", "", `{"blocks":[{"pool":"v4`, decline},
		{"empty input", "", ``, decline},
		{"array", "", `[]`, decline},
		{"null", "", `null`, decline},
	}
	for _, c := range cases {
		for _, family := range families {
			data := family.Replace(c.new)
			if c.old != "" {
				b, old := family.Replace(base), family.Replace(c.old)
				if !strings.Contains(b, old) {
					t.Fatalf("%s: %q not in %s", c.name, old, b)
				}
				data = strings.Replace(b, old, data, 1)
			}
			t.Run(c.name+"/"+family.Replace("{P}"), func(t *testing.T) {
				ok := checkDecode(t, []byte(data), c.want == accept)
				if ok && c.want == decline {
					t.Fatalf("parseNodeSpec accepts %s", data)
				}
			})
		}
	}
}
