package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/netpools"
	"github.com/ipkeeper/ipkeeper/internal/store/local"
)

// pool add refuses names no network config can name (spaces, tabs,
// newlines, '/', control characters, invalid UTF-8, too long), naming the
// argument, and creates no store; IPv4 and IPv6 pools alike.
func TestPoolAddRefusesUnnameableNames(t *testing.T) {
	for _, fam := range []struct{ name, cidr string }{{"IPv4", "10.60.0.0/24"}, {"IPv6", "fd00:60::/120"}} {
		t.Run(fam.name, func(t *testing.T) {
			for _, name := range []string{"", "a b", "a\tb", "a\nb", "trailing\n", " lead", "a/b", "a\x00b", "a\x7fb",
				"a\u00a0b", "a\u2028b", "\xff\xfe", strings.Repeat("p", maxPoolNameLength+1)} {
				h := newHarness(t)
				errs := h.fails(ExitError, []string{"pool add NAME", "pool name"}, "pool", "add", name, "--cidr", fam.cidr)
				if name != "" && len(name) <= maxPoolNameLength && !strings.Contains(errs, fmt.Sprintf("%q", name)) {
					t.Errorf("error does not quote the name %q: %s", name, errs)
				}
				if _, err := os.Stat(filepath.Join(h.dir, local.FileName)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("pool add %q created the store (stat: %v)", name, err)
				}
			}
		})
	}
}

// Every name ipkeeper gives the pools of a config's ranges (host-local
// ranges with and without a range, whereabouts ranges with and without a
// network name; IPv4 and IPv6) is a valid pool name that pool add takes and
// a config can name in ipam.pools.
func TestPoolNamesOfConfigsAreValid(t *testing.T) {
	ds := `"datastore":{"type":"local","path":"/unused"}`
	var names []string
	for _, netconf := range []string{
		`{"cniVersion":"1.0.0","name":"net.a_b-c","type":"x","ipam":{"type":"ipkeeper",` + ds + `,"ranges":[
			[{"subnet":"10.1.0.0/16"},{"subnet":"10.2.0.0/24","rangeStart":"10.2.0.10","rangeEnd":"10.2.0.20"}],
			[{"subnet":"fd00:1::/64"},{"subnet":"fd00:2::/120","rangeStart":"fd00:2::10","rangeEnd":"fd00:2::20"}]]}}`,
		`{"cniVersion":"1.0.0","name":"net","type":"x","ipam":{"type":"whereabouts",` + ds + `,"range":"10.3.0.0/24"}}`,
		`{"cniVersion":"1.0.0","name":"net","type":"x","ipam":{"type":"whereabouts",` + ds + `,"range":"fd00:3::/120","network_name":"blue.x"}}`,
		`{"cniVersion":"1.0.0","name":"net","type":"x","ipam":{"type":"whereabouts",` + ds + `,"ipRanges":[{"range":"10.4.0.0/24"},{"range":"fd00:4::/120"}]}}`,
	} {
		conf, err := config.Parse([]byte(netconf))
		if err != nil {
			t.Fatalf("config: %v\n%s", err, netconf)
		}
		sets, err := netpools.Planned(conf)
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range sets {
			for _, p := range set {
				names = append(names, p.Name)
				if err := ValidPoolName(p.Name); err != nil {
					t.Errorf("config pool name refused: %v", err)
				}
				h := newHarness(t)
				h.ok("pool", "add", p.Name, "--cidr", p.CIDR.String())
			}
		}
	}
	if len(names) < 8 {
		t.Fatalf("only %d pool names from the configs: %q", len(names), names)
	}
	for _, n := range names {
		if _, err := parsePoolsConfig(n); err != nil {
			t.Errorf("a config cannot name pool %q: %v", n, err)
		}
	}
}

// parsePoolsConfig parses a config that names one pool in ipam.pools.
func parsePoolsConfig(name string) (*config.IPAM, error) {
	q, err := json.Marshal(name)
	if err != nil {
		return nil, err
	}
	return config.Parse(fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net","type":"x","ipam":{"type":"ipkeeper",
		"datastore":{"type":"local","path":"/unused"},"pools":[%s]}}`, q))
}

// A name ValidPoolName accepts can be named by a config, exactly.
func FuzzValidPoolName(f *testing.F) {
	for _, s := range []string{"p", "net-10.0.0.0-24", "blue-fd00--64", "a b", "a\tb", "a/b", "\xff", "ü-pool", "a\u00a0b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidPoolName(name) != nil {
			return
		}
		conf, err := parsePoolsConfig(name)
		if err != nil {
			t.Fatalf("ValidPoolName(%q) accepted a name no config can name: %v", name, err)
		}
		if len(conf.Pools) != 1 || conf.Pools[0] != name {
			t.Fatalf("config names %q as %q", name, conf.Pools)
		}
	})
}
