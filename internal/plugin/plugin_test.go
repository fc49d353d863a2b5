package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

var allVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// harness drives the plugin's verbs in-process against a real local store.
type harness struct {
	t   *testing.T
	dir string
	p   *Plugin
	out *bytes.Buffer
}

func newHarness(t *testing.T) *harness {
	out := &bytes.Buffer{}
	return &harness{
		t:   t,
		dir: t.TempDir(),
		p:   &Plugin{Log: slog.New(slog.DiscardHandler), Stdout: out},
		out: out,
	}
}

// conf renders a netconf with the given ipam body (without braces) and
// cniVersion, pointing at the harness's store.
func (h *harness) conf(cniVersion, ipamBody string, extra ...string) []byte {
	top := ""
	for _, e := range extra {
		top += "," + e
	}
	return fmt.Appendf(nil, `{"cniVersion":%q,"name":"net1","type":"bridge"%s,
		"ipam":{"type":"ipkeeper","nodeName":"node-a","datastore":{"type":"local","path":%q},%s}}`,
		cniVersion, top, h.dir, ipamBody)
}

func (h *harness) args(container string, stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: container, IfName: "eth0", Netns: "/var/run/netns/" + container, Path: "/opt/cni/bin", StdinData: stdin}
}

// add runs ADD and returns the result converted to the current version.
func (h *harness) add(container string, stdin []byte) (*current.Result, error) {
	h.out.Reset()
	if err := h.p.Add(h.args(container, stdin)); err != nil {
		return nil, err
	}
	ver, err := (&version.ConfigDecoder{}).Decode(stdin)
	if err != nil {
		h.t.Fatal(err)
	}
	r, err := version.NewResult(ver, h.out.Bytes())
	if err != nil {
		h.t.Fatalf("result of version %s does not parse: %v\n%s", ver, err, h.out)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		h.t.Fatal(err)
	}
	return res, nil
}

func addrs(res *current.Result) []netip.Addr {
	var out []netip.Addr
	for _, c := range res.IPs {
		a, _ := netip.AddrFromSlice(c.Address.IP)
		out = append(out, a.Unmap())
	}
	return out
}

func cniCode(t *testing.T, err error) uint {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a *types.Error", err)
	}
	return e.Code
}

const (
	v4Ranges   = `"ranges":[[{"subnet":"10.20.0.0/24","gateway":"10.20.0.1"}]],"routes":[{"dst":"0.0.0.0/0"}]`
	v6Ranges   = `"ranges":[[{"subnet":"fd00:20::/64"}]],"routes":[{"dst":"::/0"}]`
	dualRanges = `"ranges":[[{"subnet":"10.21.0.0/24"}],[{"subnet":"fd00:21::/120"}]]`
)

func TestVerbsAcrossVersions(t *testing.T) {
	families := []struct {
		name, ipam string
		want       []string // prefixes of expected addresses
		gateway    []string
	}{
		{"IPv4", v4Ranges, []string{"10.20.0."}, []string{"10.20.0.1"}},
		{"IPv6", v6Ranges, []string{"fd00:20::"}, []string{"fd00:20::1"}},
		{"dual-stack", dualRanges, []string{"10.21.0.", "fd00:21::"}, []string{"10.21.0.1", "fd00:21::1"}},
	}
	for _, fam := range families {
		for _, ver := range allVersions {
			t.Run(fam.name+"/"+ver, func(t *testing.T) {
				h := newHarness(t)
				stdin := h.conf(ver, fam.ipam)
				res, err := h.add("c1", stdin)
				if err != nil {
					t.Fatalf("ADD: %v", err)
				}
				got := addrs(res)
				if len(got) != len(fam.want) {
					t.Fatalf("ADD gave %v, want one address per range set %v", got, fam.want)
				}
				for i, a := range got {
					if !strings.HasPrefix(a.String(), fam.want[i]) {
						t.Errorf("address %d = %s, want in %s*", i, a, fam.want[i])
					}
					if gw := res.IPs[i].Gateway.String(); gw != fam.gateway[i] {
						t.Errorf("gateway %d = %s, want %s", i, gw, fam.gateway[i])
					}
				}
				// Idempotent ADD.
				again, err := h.add("c1", stdin)
				if err != nil || fmt.Sprint(addrs(again)) != fmt.Sprint(got) {
					t.Fatalf("repeated ADD = %v, %v; want %v", addrs(again), err, got)
				}
				// A second container gets other addresses.
				other, err := h.add("c2", stdin)
				if err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if addrs(other)[i] == got[i] {
						t.Fatalf("c2 got c1's address %s", got[i])
					}
				}
				if ver != "0.3.0" && ver != "0.3.1" {
					prev := h.out.String() // c2's result, in this version
					_ = prev
					if err := h.p.Check(h.args("c1", h.withPrev(stdin, ver, res))); err != nil {
						t.Fatalf("CHECK: %v", err)
					}
					if err := h.p.Check(h.args("c2", h.withPrev(stdin, ver, res))); err == nil {
						t.Fatal("CHECK of c2 with c1's prevResult passed")
					}
				}
				if err := h.p.Del(h.args("c1", stdin)); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				if err := h.p.Del(h.args("c1", stdin)); err != nil {
					t.Fatalf("repeated DEL: %v", err)
				}
				if ver == "0.4.0" || ver == "1.0.0" || ver == "1.1.0" {
					err := h.p.Check(h.args("c1", h.withPrev(stdin, ver, res)))
					if err == nil || cniCode(t, err) != types.ErrUnknownContainer {
						t.Fatalf("CHECK after DEL = %v, want code 3", err)
					}
				}
				if ver == "1.1.0" {
					if err := h.p.Status(h.args("", stdin)); err != nil {
						t.Fatalf("STATUS: %v", err)
					}
				}
			})
		}
	}
}

// withPrev adds prevResult (res in version ver) to a netconf.
func (h *harness) withPrev(stdin []byte, ver string, res *current.Result) []byte {
	r, err := res.GetAsVersion(ver)
	if err != nil {
		h.t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := r.PrintTo(&buf); err != nil {
		h.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(stdin, &m); err != nil {
		h.t.Fatal(err)
	}
	var prev any
	if err := json.Unmarshal(buf.Bytes(), &prev); err != nil {
		h.t.Fatal(err)
	}
	m["prevResult"] = prev
	out, err := json.Marshal(m)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}
