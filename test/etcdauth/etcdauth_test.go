// Package etcdauth tests what etcd's own access control can enforce on
// ipkeeper's etcd layout: a real etcd with client-certificate users and
// roles limited to key prefixes, and the ipkeeper plugin binary using one
// node's certificate.
package etcdauth

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// pluginBin is the ipkeeper binary built for this test run.
var pluginBin string

func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "etcdauth-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pluginBin = filepath.Join(tmp, "ipkeeper")
	if err := testenv.Build(context.Background(), tmp, "./cmd/ipkeeper"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}

// etcdPrefix is the datastore's key prefix in these tests.
const etcdPrefix = "/ipkeeper"

// perm is one permission of an etcd role: a key, or every key under a
// prefix, read-only or read-write.
type perm struct {
	key    string // relative to etcdPrefix + "/"
	prefix bool
	write  bool
}

// nodeRole is what a node's etcd role needs for the plugin on that node
// when its pools are its own (ranges or pod CIDRs no other node
// allocates from, so it never borrows): read the layout marker, read and
// write its own pool's definition and its reservations (read with the
// pool; a pool's creation clears them), the claims of its pool's blocks,
// its claims index and the parts of its node object. README "Security" lists the same.
func nodeRole(node, pool string) []perm {
	return []perm{
		{key: "meta/", prefix: true},
		{key: "pools2/" + pool, write: true},
		{key: "reservations/" + pool, write: true},
		{key: "claims/" + pool + "/", prefix: true, write: true},
		{key: "nodeclaims/" + node + "/", prefix: true, write: true},
		{key: "nodes/" + node + "/", prefix: true, write: true},
	}
}

// authEtcd starts an etcd with client-certificate authentication, lets
// root (a certificate with common name "root") set up the roles of nodes
// and enables auth. It returns the endpoint and the certificates.
func authEtcd(t *testing.T, roles map[string][]perm) (endpoint string, p *pki, certs map[string][2]string) {
	t.Helper()
	p = newPKI(t)
	sc, sk := p.issue(t, "etcd-server", true)
	e := etcdtest.ForTest(t, &etcdtest.TLS{CertFile: sc, KeyFile: sk, CAFile: p.CAFile})
	certs = map[string][2]string{}
	for _, u := range []string{"root", "node-a", "node-b"} {
		c, k := p.issue(t, u, false)
		certs[u] = [2]string{c, k}
	}
	cli := client(t, e.Endpoint, p, certs["root"])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := cli.RoleAdd(ctx, "root")
	must("role add root", err)
	_, err = cli.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true})
	must("user add root", err)
	_, err = cli.UserGrantRole(ctx, "root", "root")
	must("grant root", err)
	for user, perms := range roles {
		_, err = cli.RoleAdd(ctx, user)
		must("role add "+user, err)
		for _, pm := range perms {
			key := etcdPrefix + "/" + pm.key
			end := ""
			if pm.prefix {
				end = clientv3.GetPrefixRangeEnd(key)
			}
			typ := clientv3.PermissionType(clientv3.PermRead)
			if pm.write {
				typ = clientv3.PermissionType(clientv3.PermReadWrite)
			}
			_, err = cli.RoleGrantPermission(ctx, user, key, end, typ)
			must("grant "+user+" "+key, err)
		}
		_, err = cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true})
		must("user add "+user, err)
		_, err = cli.UserGrantRole(ctx, user, user)
		must("grant role "+user, err)
	}
	_, err = cli.AuthEnable(ctx)
	must("auth enable", err)
	return e.Endpoint, p, certs
}

// client is an etcd client authenticated by certificate cert (cert, key).
func client(t *testing.T, endpoint string, p *pki, cert [2]string) *clientv3.Client {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(cert[0], cert[1])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509Pool(t, p.CAFile)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// netconf is an IPAM-only network config for node on etcd with the
// node's certificate and its own range.
func netconf(endpoint, caFile string, cert [2]string, node, subnet string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net","type":"bridge",
	"ipam":{"type":"ipkeeper","nodeName":%q,
	  "datastore":{"type":"etcd","endpoints":[%q],"prefix":%q,"caFile":%q,"certFile":%q,"keyFile":%q},
	  "ranges":[[{"subnet":%q}]]}}`, node, endpoint, etcdPrefix, caFile, cert[0], cert[1], subnet)
}

// result is what one plugin run printed.
type result struct {
	IPs    []netip.Addr
	Code   int
	Msg    string
	Stderr string
}

func runPlugin(t *testing.T, verb, container string, conf []byte, lockDir string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pluginBin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+verb, "CNI_CONTAINERID="+container,
		"CNI_NETNS=/var/run/netns/"+container, "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin",
		"IPKEEPER_LOCK_DIR="+lockDir)
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	r := result{Stderr: stderr.String()}
	var out struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
		IPs  []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if stdout.Len() > 0 {
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: stdout is not JSON: %v\n%s", verb, container, err, stdout.String())
		}
	}
	r.Code, r.Msg = out.Code, out.Msg
	for _, ip := range out.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			t.Fatal(err)
		}
		r.IPs = append(r.IPs, p.Addr())
	}
	return r
}

// TestPerNodeRole: with an etcd role per node limited to the node's own
// keys (nodeRole) and each node's pools its own, the plugin on node-a
// with node-a's certificate allocates and releases on node-a, and etcd
// refuses node-a's certificate every write of node-b's keys (its node
// object, its claims index, the claims of its pool) and an ADD that
// names node-b.
func TestPerNodeRole(t *testing.T) {
	const poolA, poolB = "net-10.81.1.0-24", "net-10.81.2.0-24" // the names the config's ranges give
	endpoint, p, certs := authEtcd(t, map[string][]perm{
		"node-a": nodeRole("node-a", poolA),
		"node-b": nodeRole("node-b", poolB),
	})
	// The store's first open by an admin writes the layout marker.
	lock := t.TempDir()
	root := netconf(endpoint, p.CAFile, certs["root"], "node-b", "10.81.2.0/24")
	if r := runPlugin(t, "ADD", "b1", root, lock); r.Code != 0 || len(r.IPs) != 1 {
		t.Fatalf("root's ADD on node-b: code %d %s\n%s", r.Code, r.Msg, r.Stderr)
	}

	confA := netconf(endpoint, p.CAFile, certs["node-a"], "node-a", "10.81.1.0/24")
	lockA := t.TempDir()
	r := runPlugin(t, "ADD", "a1", confA, lockA)
	if r.Code != 0 || len(r.IPs) != 1 || !netip.MustParsePrefix("10.81.1.0/24").Contains(r.IPs[0]) {
		t.Fatalf("node-a's ADD with its own certificate: code %d %s %v\n%s", r.Code, r.Msg, r.IPs, r.Stderr)
	}
	if r := runPlugin(t, "ADD", "a2", confA, lockA); r.Code != 0 || len(r.IPs) != 1 {
		t.Fatalf("node-a's second ADD: code %d %s\n%s", r.Code, r.Msg, r.Stderr)
	}
	if r := runPlugin(t, "DEL", "a1", confA, lockA); r.Code != 0 {
		t.Fatalf("node-a's DEL: code %d %s\n%s", r.Code, r.Msg, r.Stderr)
	}

	// node-a's certificate, as node-b (a config naming node-b and its
	// range): refused, as a configuration whose credentials cannot work
	// (CNI error 7) naming etcd's refusal.
	asB := netconf(endpoint, p.CAFile, certs["node-a"], "node-b", "10.81.2.0/24")
	if r := runPlugin(t, "ADD", "x1", asB, t.TempDir()); r.Code != 7 || !strings.Contains(r.Msg, "permission denied") {
		t.Fatalf("node-a's certificate ADDing on node-b: code %d %s, want 7 and etcd's permission denied\n%s", r.Code, r.Msg, r.Stderr)
	}

	cli := client(t, endpoint, p, certs["node-a"])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rootCli := client(t, endpoint, p, certs["root"])
	claims, err := rootCli.Get(ctx, etcdPrefix+"/claims/"+poolB+"/", clientv3.WithPrefix())
	if err != nil || len(claims.Kvs) == 0 {
		t.Fatalf("node-b's claims: %v, %v", claims, err)
	}
	for _, w := range []struct {
		what string
		op   clientv3.Op
	}{
		{"put node-b's object", clientv3.OpPut(etcdPrefix+"/nodes/node-b/head", "{}")},
		{"delete node-b's object", clientv3.OpDelete(etcdPrefix+"/nodes/node-b/", clientv3.WithPrefix())},
		{"delete node-b's claim", clientv3.OpDelete(string(claims.Kvs[0].Key))},
		{"put a claim of node-b's pool", clientv3.OpPut(etcdPrefix+"/claims/"+poolB+"/10.81.2.192-26", "{}")},
		{"put into node-b's claims index", clientv3.OpPut(etcdPrefix+"/nodeclaims/node-b/x", "{}")},
		{"redefine node-b's pool", clientv3.OpPut(etcdPrefix+"/pools2/"+poolB, "{}")},
		{"read node-b's object", clientv3.OpGet(etcdPrefix+"/nodes/node-b/", clientv3.WithPrefix())},
	} {
		if _, err := cli.Do(ctx, w.op); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("node-a's certificate: %s: %v, want permission denied", w.what, err)
		}
	}
	if _, err := cli.Do(ctx, clientv3.OpPut(etcdPrefix+"/nodes/node-a-x/head", "{}")); err == nil {
		t.Error("node-a's certificate wrote nodes/node-a-x/head: the role's node prefix must end in /")
	}
}
