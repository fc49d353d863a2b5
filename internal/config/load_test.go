package config

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadFile reads real .conf and .conflist files.
func TestLoadFile(t *testing.T) {
	t.Setenv("NODENAME", "node-f")
	t.Run("conf", func(t *testing.T) {
		p := writeFile(t, "10-net.conf", `{"cniVersion": "1.0.0", "name": "confnet", "type": "bridge",
			"ipam": {"type": "ipkeeper", "ranges": [[{"subnet": "10.5.0.0/16"}], [{"subnet": "fd00:5::/64"}]]}}`)
		got, err := LoadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, got)
		if got.Network != "confnet" || got.NodeName != "node-f" || len(got.RangeSets) != 2 ||
			got.RangeSets[0][0].Subnet != pfx("10.5.0.0/16") || got.RangeSets[1][0].Gateway != addr("fd00:5::1") {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("conflist picks the first ipkeeper plugin, list name and version", func(t *testing.T) {
		p := writeFile(t, "10-net.conflist", `{"cniVersion": "1.1.0", "name": "listnet", "plugins": [
			{"type": "bridge", "name": "ignored", "ipam": {"type": "host-local", "subnet": "10.9.0.0/16"}},
			{"type": "macvlan", "cniVersion": "0.3.1", "name": "ignored", "ipam": {"type": "ipkeeper", "pools": ["v4", "v6"],
				"datastore": {"type": "etcd", "endpoints": ["https://[fd00::1]:2379"]}}},
			{"type": "ipvlan", "ipam": {"type": "ipkeeper", "pools": ["other"]}},
			{"type": "portmap", "capabilities": {"portMappings": true}}]}`)
		got, err := LoadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, got)
		if got.Network != "listnet" || got.CNIVersion != "1.1.0" || strings.Join(got.Pools, ",") != "v4,v6" ||
			got.Datastore.Type != DatastoreEtcd {
			t.Errorf("got %+v", got)
		}
	})
	bad := []struct {
		name, file, content, key, fragment string
	}{
		{"conf with another ipam type", "a.conf", `{"name": "n", "ipam": {"type": "host-local", "subnet": "10.0.0.0/24"}}`,
			"ipam.type", `"host-local" is not "ipkeeper"`},
		{"conf without ipam", "a.conf", `{"name": "n", "type": "bridge"}`, "ipam.type", "is missing"},
		{"conflist without ipkeeper", "a.conflist", `{"name": "n", "plugins": [{"type": "bridge", "ipam": {"type": "host-local"}}]}`,
			"plugins", `has no plugin with ipam type "ipkeeper"`},
		{"conflist plugins not a list", "a.conflist", `{"name": "n", "plugins": {}}`, "plugins", "must be an array"},
		{"conflist plugin not an object", "a.conflist", `{"name": "n", "plugins": ["bridge"]}`, "plugins[0]", "must be an object"},
		{"conflist without name", "a.conflist", `{"plugins": [{"name": "p", "ipam": {"type": "ipkeeper", "pools": ["p"]}}]}`, "name", "is missing"},
		{"conflist invalid ipam", "a.conflist", `{"name": "n", "plugins": [{"ipam": {"type": "ipkeeper", "subnet": "fd00::/127"}}]}`,
			"ipam.subnet", "too small"},
		{"malformed", "a.conf", "{\n\"name\": \"n\"\n\"ipam\": {}}", "", "line 3, column 1"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, tt.file, tt.content)
			_, err := LoadFile(p)
			checkErr(t, err, tt.key, tt.fragment, p)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "nope.conf")
		_, err := LoadFile(p)
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), p) {
			t.Errorf("err = %v, want a not-exist error naming %s", err, p)
		}
	})
}
