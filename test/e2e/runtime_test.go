package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// runtime is a minimal container runtime: libcni with its own cache dir,
// one network configuration list, one host namespace.
type runtime struct {
	h    *host
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	conf []byte // the conflist as written to confFile
	// confFile holds the conflist, for `ipkeeperctl --config`.
	confFile string
}

// container is one attachment: a namespace plus its CNI result.
type container struct {
	id     string
	ns     string
	nsPath string
	result *current.Result
}

func newRuntime(t *testing.T, h *host, conflist any) *runtime {
	t.Helper()
	b, err := json.MarshalIndent(conflist, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("libcni rejected the conflist: %v\n%s", err, b)
	}
	dir := t.TempDir()
	f := filepath.Join(dir, list.Name+".conflist")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return &runtime{
		h:        h,
		cni:      libcni.NewCNIConfigWithCacheDir([]string{h.cniPath}, filepath.Join(dir, "cache"), nil),
		list:     list,
		conf:     b,
		confFile: f,
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (r *runtime) rt(c *container) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: c.id, NetNS: c.nsPath, IfName: "eth0"}
}

// newContainer makes a namespace for a container; nothing is attached yet.
func (r *runtime) newContainer(t *testing.T, id string) *container {
	t.Helper()
	ns, path := addNetns(t, "c")
	return &container{id: id, ns: ns, nsPath: path}
}

// add attaches c to the network and returns the error of the whole chain.
func (r *runtime) add(t *testing.T, c *container) error {
	t.Helper()
	res, err := r.cni.AddNetworkList(ctxT(t), r.list, r.rt(c))
	if err != nil {
		return err
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatalf("converting the %s result of %s: %v", r.list.CNIVersion, c.id, err)
	}
	c.result = cur
	return nil
}

// mustAdd creates a container and attaches it, failing the test on error.
func (r *runtime) mustAdd(t *testing.T, id string) *container {
	t.Helper()
	c := r.newContainer(t, id)
	if err := r.add(t, c); err != nil {
		t.Fatalf("ADD %s: %v", id, err)
	}
	return c
}

func (r *runtime) del(t *testing.T, c *container) error {
	t.Helper()
	return r.cni.DelNetworkList(ctxT(t), r.list, r.rt(c))
}

func (r *runtime) status(t *testing.T) error {
	t.Helper()
	return r.cni.GetStatusNetworkList(ctxT(t), r.list)
}

// addrs returns the container's addresses of the given family (4 or 6).
func (c *container) addrs(t *testing.T, family int) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, ip := range c.result.IPs {
		a, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			t.Fatalf("%s: bad address %v", c.id, ip.Address)
		}
		a = a.Unmap()
		if (family == 4) == a.Is4() {
			out = append(out, a)
		}
	}
	return out
}

// addr4 returns the container's only IPv4 address.
func (c *container) addr4(t *testing.T) netip.Addr {
	t.Helper()
	a := c.addrs(t, 4)
	if len(a) != 1 {
		t.Fatalf("%s: want exactly one IPv4 address, result has %v", c.id, c.result.IPs)
	}
	return a[0]
}

// gateway returns the gateway the result gives for family.
func (c *container) gateway(t *testing.T, family int) netip.Addr {
	t.Helper()
	for _, ip := range c.result.IPs {
		if ip.Gateway == nil {
			continue
		}
		g, _ := netip.AddrFromSlice(ip.Gateway)
		if g = g.Unmap(); (family == 4) == g.Is4() {
			return g
		}
	}
	t.Fatalf("%s: result has no IPv%d gateway: %v", c.id, family, c.result)
	return netip.Addr{}
}

// cniCode returns the code of a CNI error returned by libcni, or fails.
func cniCode(t *testing.T, err error) (uint, string) {
	t.Helper()
	var e *types.Error
	if err == nil {
		t.Fatal("want a CNI error, got success")
	}
	if !asTypesError(err, &e) {
		t.Fatalf("want a CNI error object, got %T: %v", err, err)
	}
	return e.Code, e.Msg
}

func asTypesError(err error, target **types.Error) bool {
	for err != nil {
		if e, ok := err.(*types.Error); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// bridgeConf is a conflist with one bridge plugin delegating to ipam.
func bridgeConf(name, version string, isGateway bool, ipam map[string]any) map[string]any {
	return map[string]any{
		"cniVersion": version,
		"name":       name,
		"plugins": []any{map[string]any{
			"type":      "bridge",
			"bridge":    "ipk0",
			"isGateway": isGateway,
			"ipam":      ipam,
		}},
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }

func idf(format string, a ...any) string { return fmt.Sprintf(format, a...) }
