package config

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// testEnv is an environment with the given variables, hostname "host-a" and
// real file reads.
func testEnv(vars map[string]string) environment {
	return environment{
		getenv:   func(k string) string { return vars[k] },
		hostname: func() (string, error) { return "host-a", nil },
		readFile: readSmallRegularFile,
	}
}

// noFilesEnv is testEnv without any readable file (for fuzzing).
func noFilesEnv() environment {
	e := testEnv(nil)
	e.readFile = func(string) ([]byte, error) { return nil, fs.ErrNotExist }
	return e
}

// conf wraps an ipam object into a whole network config.
func conf(ipam string) []byte {
	return []byte(`{"cniVersion": "1.0.0", "name": "net1", "type": "bridge", "ipam": ` + ipam + `}`)
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func pfxs(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, pfx(s))
	}
	return out
}

// defaultDatastore is what an absent datastore means.
var defaultDatastore = Datastore{Type: DatastoreLocal, Path: DefaultLocalPath,
	DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}

// etcdDatastore is an etcd datastore with defaults and the given endpoints.
func etcdDatastore(endpoints ...string) Datastore {
	return Datastore{Type: DatastoreEtcd, Endpoints: endpoints, Prefix: DefaultEtcdPrefix,
		DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}
}

// writeFile writes content into a new file in t's temp dir.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkErr asserts err wraps ErrInvalid, is a FieldError for key (when key
// is not "-") and mentions every fragment.
func checkErr(t *testing.T, err error, key string, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one for %s", key)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %q does not wrap ErrInvalid", err)
	}
	if key != "-" {
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("error %q is not a *FieldError", err)
		}
		if fe.Key != key {
			t.Errorf("error key = %q, want %q (error %q)", fe.Key, key, err)
		}
		if key != "" && !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not name %q", err, key)
		}
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not contain %q", err, f)
		}
	}
}

// checkInvariants asserts what every successfully parsed config satisfies.
func checkInvariants(t testing.TB, c *IPAM) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("invariant broken: "+format+"\nconfig: %+v", append(args, c)...)
	}
	if c.Network == "" || c.NodeName == "" {
		fail("empty network or node name")
	}
	if len(c.Network) > MaxNameLength || len(c.NodeName) > MaxNameLength || len(c.NetworkName) > MaxNameLength {
		fail("name longer than %d", MaxNameLength)
	}
	if len(c.RangeSets) > MaxRangeSets || len(c.Routes) > MaxRoutes || len(c.Pools) > MaxPools {
		fail("%d range sets, %d routes, %d pools", len(c.RangeSets), len(c.Routes), len(c.Pools))
	}
	for _, p := range []string{c.Kubeconfig, c.AgentSocket} {
		if p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0)) {
			fail("ipam.kubernetes path %q not absolute and clean", p)
		}
	}
	if len(c.AgentSocket) > MaxSocketPath {
		fail("agent socket path of %d bytes", len(c.AgentSocket))
	}
	switch c.Syntax {
	case SyntaxNative, SyntaxHostLocal, SyntaxWhereabouts:
	default:
		fail("syntax %q", c.Syntax)
	}
	if (len(c.Pools) == 0) == (len(c.RangeSets) == 0) {
		fail("want pools xor range sets")
	}
	if c.BlockSize < 0 || c.BlockSize > 32 || c.BlockSizeV6 < 0 || c.BlockSizeV6 > 128 {
		fail("block sizes %d %d", c.BlockSize, c.BlockSizeV6)
	}
	var all []Range
	for i, set := range c.RangeSets {
		if len(set) == 0 {
			fail("empty range set %d", i)
		}
		for _, r := range set {
			if r.UsePodCIDR != 0 {
				if !c.PodAware() || r.Subnet.IsValid() || (r.UsePodCIDR != 4 && r.UsePodCIDR != 6) {
					fail("usePodCidr placeholder %+v", r)
				}
				continue
			}
			s := r.Subnet
			if !s.IsValid() || s != s.Masked() || s.Addr().Is4In6() {
				fail("subnet %v not valid and masked", s)
			}
			if s.Bits() > s.Addr().BitLen()-2 {
				fail("subnet %v too small", s)
			}
			if s.Addr().Is4() != set[0].Subnet.Addr().Is4() {
				fail("mixed families in set %d", i)
			}
			for _, a := range []netip.Addr{r.RangeStart, r.RangeEnd, r.Gateway} {
				if a.IsValid() && !s.Contains(a) {
					fail("%v outside subnet %v", a, s)
				}
			}
			first, last := r.Bounds()
			if !s.Contains(first) || !s.Contains(last) || last.Less(first) {
				fail("bounds %v-%v of %v", first, last, s)
			}
			if c.Syntax != SyntaxWhereabouts && !r.Gateway.IsValid() {
				fail("no gateway with %s syntax", c.Syntax)
			}
			if c.BlockSize != 0 && s.Addr().Is4() && c.BlockSize < s.Bits() {
				fail("block /%d larger than %v", c.BlockSize, s)
			}
			for _, p := range r.Exclude {
				if p != p.Masked() || !p.Overlaps(s) {
					fail("exclude %v not masked or outside %v", p, s)
				}
			}
			if _, ok := firstUsable(r); !ok {
				fail("range %+v has no usable address", r)
			}
			if r.Gateway == s.Addr() || (s.Addr().Is4() && r.Gateway == ipam.LastAddr(s)) {
				fail("gateway %v is the network or broadcast address of %v", r.Gateway, s)
			}
			for _, o := range all {
				of, ol := o.Bounds()
				if of.BitLen() == first.BitLen() && of.Compare(last) <= 0 && first.Compare(ol) <= 0 {
					fail("ranges %v and %v overlap", o, r)
				}
			}
			all = append(all, r)
		}
	}
	for _, rt := range c.Routes {
		if rt.Dst != rt.Dst.Masked() || (rt.GW.IsValid() && rt.GW.BitLen() != rt.Dst.Addr().BitLen()) {
			fail("route %+v", rt)
		}
	}
	d := c.Datastore
	if d.DialTimeout <= 0 || d.RequestTimeout <= 0 {
		fail("timeouts %v %v", d.DialTimeout, d.RequestTimeout)
	}
	switch d.Type {
	case DatastoreLocal:
		if !filepath.IsAbs(d.Path) || len(d.Endpoints) != 0 {
			fail("local datastore %+v", d)
		}
	case DatastoreEtcd:
		if len(d.Endpoints) == 0 || !strings.HasPrefix(d.Prefix, "/") || strings.HasSuffix(d.Prefix, "/") {
			fail("etcd datastore %+v", d)
		}
	default:
		fail("datastore type %q", d.Type)
	}
}

// rejectCase is a config parse must refuse: the key its error names (see
// checkErr) and fragments of the message.
type rejectCase struct {
	name      string
	in        []byte
	key       string
	fragments []string
}

// checkRejects runs each case as a subtest: parse refuses it with an
// error naming the key and every fragment.
func checkRejects(t *testing.T, cases []rejectCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(tt.in, testEnv(nil))
			if err == nil {
				t.Fatalf("parse accepted it: %+v", got)
			}
			checkErr(t, err, tt.key, tt.fragments...)
		})
	}
}
