package ctl

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestJSONAndYAML runs read-only verbs with -o json and -o yaml: both
// parse, say the same, and decode into the documented shapes with the
// values the scene holds.
func TestJSONAndYAML(t *testing.T) {
	h := newHarness(t)
	h.populate()
	for _, c := range []struct {
		args  string
		into  any
		check func(t *testing.T, v any)
	}{
		{"pool list", &poolList{}, func(t *testing.T, v any) {
			l := v.(*poolList)
			if len(l.Pools) != 2 || l.Pools[0].Name != "p4" || l.Pools[0].Gateway != "10.9.0.1" || l.Pools[1].BlockSize != 124 {
				t.Errorf("%+v", l)
			}
		}},
		{"show --blocks --nodes", &showView{}, func(t *testing.T, v any) {
			s := v.(*showView)
			if len(s.Pools) != 2 || s.Pools[0].Total != 245 || s.Pools[0].InUse != 3 || s.Pools[0].Free != 242 ||
				len(s.Blocks) != 3 || s.Blocks[1].Node != "node-b" || len(s.Nodes) != 2 || s.Nodes[0].InUse != 4 {
				t.Errorf("%+v", s)
			}
		}},
		{"show", &showView{}, func(t *testing.T, v any) {
			if s := v.(*showView); s.Blocks != nil || s.Nodes != nil {
				t.Errorf("show without flags printed blocks or nodes: %+v", s)
			}
		}},
		{"block show 10.9.0.0/24", &blocksView{}, func(t *testing.T, v any) {
			b := v.(*blocksView)
			if len(b.Blocks) != 2 || len(b.Blocks[0].Allocations) != 2 || b.Blocks[0].Allocations[1].Pod != "web-2" || b.Blocks[1].Allocations[0].Addr != "10.9.0.16" {
				t.Errorf("%+v", b)
			}
		}},
		{"block show 10.9.0.5", &blocksView{}, func(t *testing.T, v any) {
			if b := v.(*blocksView); len(b.Blocks) != 1 || b.Blocks[0].CIDR != "10.9.0.0/28" {
				t.Errorf("%+v", b)
			}
		}},
		{"block show 10.9.0.128/28", &blocksView{}, func(t *testing.T, v any) {
			if b := v.(*blocksView); len(b.Blocks) != 0 || b.Query != "10.9.0.128/28" {
				t.Errorf("unclaimed block: %+v", b)
			}
		}},
		{"ip show fd00:9::2", &ipView{}, func(t *testing.T, v any) {
			i := v.(*ipView)
			if len(i.Holdings) != 1 || i.Holdings[0].State != stateAllocated || i.Holdings[0].Handle == nil ||
				i.Holdings[0].Handle.NetNS != "/var/run/netns/cni-c2" || i.Holdings[0].Handle.Created != epoch {
				t.Errorf("%+v", i)
			}
		}},
		{"ip show 10.9.0.255", &ipView{}, func(t *testing.T, v any) {
			if i := v.(*ipView); i.Holdings[0].State != stateReserved {
				t.Errorf("broadcast: %+v", i)
			}
		}},
		{"ip show 10.9.0.100", &ipView{}, func(t *testing.T, v any) {
			if i := v.(*ipView); i.Holdings[0].State != stateUnclaimed {
				t.Errorf("unclaimed: %+v", i)
			}
		}},
		{"check", &checkView{}, func(t *testing.T, v any) {
			if c := v.(*checkView); c.Counts.Allocated != 5 || c.Problems == nil || len(c.Problems) != 0 {
				t.Errorf("%+v", c)
			}
		}},
		{"gc --dry-run", &gcView{}, func(t *testing.T, v any) {
			if g := v.(*gcView); g.Node != "node-a" || len(g.Released) != 1 {
				t.Errorf("%+v", g)
			}
		}},
		{"import calico --dry-run --file " + calicoFile, &importView{}, func(t *testing.T, v any) {
			if i := v.(*importView); len(i.Addresses) != 9 || !i.DryRun || len(i.Changes) != 11 {
				t.Errorf("%+v", i)
			}
		}},
	} {
		t.Run(c.args, func(t *testing.T) {
			h.t = t
			args := strings.Fields(c.args)
			js := h.ok(append(args, "-o", "json")...)
			ym := h.ok(append(args, "-o", "yaml")...)
			var fromJSON, fromYAML any
			if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
				t.Fatalf("-o json is not JSON: %v\n%s", err, js)
			}
			yj, err := yaml.YAMLToJSON([]byte(ym))
			if err != nil {
				t.Fatalf("-o yaml is not YAML: %v\n%s", err, ym)
			}
			if err := json.Unmarshal(yj, &fromYAML); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fromJSON, fromYAML) {
				t.Errorf("json and yaml differ:\n%s\n%s", js, ym)
			}
			dec := json.NewDecoder(strings.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(c.into); err != nil {
				t.Fatalf("decode into %T: %v\n%s", c.into, err, js)
			}
			c.check(t, c.into)
		})
	}
}
