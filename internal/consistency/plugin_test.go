package consistency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/consistency"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
)

// buildPlugin builds the real ipkeeper plugin binary into a temp dir.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ipkeeper")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/ipkeeper")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ipkeeper: %v\n%s", err, out)
	}
	return bin
}

type attachment struct{ network, container, ifname string }

// plugin runs the plugin binary for one attachment on node-a, with the
// store in dir and one whereabouts-style range, whose pool every network
// shares (named after the range); it returns stdout, failing on a CNI
// error.
type plugin struct {
	t      *testing.T
	bin    string
	dir    string
	subnet string
}

func (p plugin) run(verb string, at attachment, extra string) []byte {
	p.t.Helper()
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge"%s,
		"ipam":{"type":"ipkeeper","nodeName":"node-a","datastore":{"type":"local","path":%q},"range":%q}}`,
		at.network, extra, p.dir, p.subnet)
	cmd := exec.Command(p.bin)
	cmd.Stdin = strings.NewReader(conf)
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+verb, "CNI_CONTAINERID="+at.container, "CNI_IFNAME="+at.ifname,
		"CNI_NETNS=/proc/self/ns/net", "CNI_NETNS_OVERRIDE=1", "CNI_PATH=/opt/cni/bin")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		p.t.Fatalf("%s %+v: %v\nstdout: %s\nstderr: %s", verb, at, err, out.Bytes(), errOut.Bytes())
	}
	return out.Bytes()
}

func (p plugin) add(at attachment) netip.Addr {
	p.t.Helper()
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	out := p.run("ADD", at, "")
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) != 1 {
		p.t.Fatalf("ADD %+v printed %s (%v)", at, out, err)
	}
	pfx, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil {
		p.t.Fatal(err)
	}
	return pfx.Addr()
}

// check opens the store (between plugin calls) and fails unless the
// consistency checker finds nothing; it returns how many addresses are
// allocated.
func (p plugin) check() int {
	p.t.Helper()
	st, err := datastore.Open(context.Background(), config.Datastore{Type: config.DatastoreLocal, Path: p.dir}, datastore.Options{})
	if err != nil {
		p.t.Fatal(err)
	}
	defer st.Close()
	rep, err := consistency.CheckStore(context.Background(), st)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		p.t.Fatal(err)
	}
	return rep.Counts.Allocated
}

// TestPluginDottedAttachments runs the real plugin binary for
// attachments whose parts, joined by dots, spell the same string (handle
// IDs made that way would make them share one address): each gets its
// own address, GC keeps the one it is told is live and releases the
// other, DEL frees what is left, and the store checks clean after every
// step; IPv4 and IPv6.
func TestPluginDottedAttachments(t *testing.T) {
	bin := buildPlugin(t)
	for _, subnet := range []string{"10.41.0.0/24", "fd41::/120"} {
		for _, pair := range [][2]attachment{
			{{"n", "a.b", "eth0"}, {"n", "a", "b.eth0"}},
			{{"n", "x.y", "eth0"}, {"n.x", "y", "eth0"}},
		} {
			t.Run(fmt.Sprintf("%s/%+v_vs_%+v", subnet, pair[0], pair[1]), func(t *testing.T) {
				p := plugin{t: t, bin: bin, dir: t.TempDir(), subnet: subnet}
				x, y := p.add(pair[0]), p.add(pair[1])
				if x == y {
					t.Fatalf("%+v and %+v both got %s", pair[0], pair[1], x)
				}
				if n := p.check(); n != 2 {
					t.Fatalf("%d addresses allocated after two ADDs, want 2", n)
				}
				// GC of x's network with only y live: on y's network too
				// when they share one.
				valid := fmt.Sprintf(`,"cni.dev/valid-attachments":[{"containerID":%q,"ifname":%q}]`, pair[1].container, pair[1].ifname)
				p.run("GC", attachment{network: pair[0].network}, valid)
				if pair[0].network != pair[1].network {
					p.run("GC", attachment{network: pair[1].network}, valid)
				}
				if n := p.check(); n != 1 {
					t.Fatalf("%d addresses allocated after GC with only %+v live, want 1", n, pair[1])
				}
				if again := p.add(pair[1]); again != y {
					t.Fatalf("repeated ADD of %+v = %s, want its %s", pair[1], again, y)
				}
				p.run("DEL", pair[0], "")
				p.run("DEL", pair[1], "")
				if n := p.check(); n != 0 {
					t.Fatalf("%d addresses allocated after DEL of both, want 0", n)
				}
			})
		}
	}
}
