package durability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// pluginBin is the ipkeeper binary built for this test run.
var pluginBin string

func TestMain(m *testing.M) {
	dir, remove, err := testenv.BuildCommands("./cmd/ipkeeper")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pluginBin = filepath.Join(dir, "ipkeeper")
	code := m.Run()
	remove()
	os.Exit(code)
}

// needStrace returns strace's path. A missing strace skips the test,
// except under CI=true, where it fails (make test installs strace).
func needStrace(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("strace")
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("strace is missing (CI=true): install it (apt-get install -y strace)")
	}
	t.Skip("strace is missing")
	return ""
}

// tracedAdd runs one ADD of the real plugin under strace and returns its
// parsed system calls and the printed result.
func tracedAdd(t *testing.T, strace, container string, conf []byte, env ...string) ([]Call, []byte) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "strace.log")
	cmd := exec.CommandContext(t.Context(), strace, "-f", "-qq", "-y", "-yy", "-s", "4096", "-o", log,
		"-e", "trace=write,writev,pwrite64,pwritev,pwritev2,sendto,sendmsg,read,readv,recvfrom,recvmsg,fsync,fdatasync,sync_file_range",
		pluginBin)
	cmd.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID="+container, "CNI_NETNS=/var/run/netns/durability-absent",
		"CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ADD %s under strace: %v\nstdout %s\nstderr %s", container, err, stdout.Bytes(), stderr.Bytes())
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || len(res.IPs) != 2 {
		t.Fatalf("ADD %s printed %s (%v), want a result with two addresses", container, stdout.Bytes(), err)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, err := ParseStrace(f)
	if err != nil {
		t.Fatal(err)
	}
	return calls, stdout.Bytes()
}

// resultWrite finds the write of the result to stdout: the first write to
// descriptor 1 carrying the result's JSON.
func resultWrite(t *testing.T, calls []Call) Call {
	t.Helper()
	for _, c := range calls {
		if c.IsWrite() && c.FD == 1 && strings.Contains(c.Args, "cniVersion") {
			return c
		}
	}
	t.Fatal("strace shows no write of the result to stdout")
	return Call{}
}

const ranges = `"ranges":[[{"subnet":"10.99.0.0/24"}],[{"subnet":"fd99::/120"}]]`

// The local store: every write to the database file that happens before
// the result is printed is followed by a successful fdatasync/fsync of the
// file that returns before the result's write to stdout begins. A first
// ADD (new file) and a second (existing file), IPv4 and IPv6 together.
func TestLocalAddIsDurableBeforePrinted(t *testing.T) {
	strace := needStrace(t)
	dir := filepath.Join(t.TempDir(), "store")
	conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":{"type":"ipkeeper",
		"datastore":{"type":"local","path":%q},%s}}`, dir, ranges)
	for _, container := range []string{"c1", "c2"} {
		t.Run(container, func(t *testing.T) {
			calls, _ := tracedAdd(t, strace, container, conf)
			out := resultWrite(t, calls)
			isDB := func(c Call) bool { return strings.HasSuffix(c.Path, "/ipkeeper.db") }
			lastWrite := -1
			for _, c := range calls {
				if c.IsWrite() && isDB(c) && c.Start < out.Start {
					if c.End < 0 || c.End > out.Start {
						t.Fatalf("a write to the database (%s) was still running when the result was printed", c.Name)
					}
					lastWrite = max(lastWrite, c.End)
				}
			}
			if lastWrite < 0 {
				t.Fatal("strace shows no write to the database file before the result: the test saw nothing to check")
			}
			for _, c := range calls {
				if c.IsSync() && isDB(c) && c.OK() && c.Start > lastWrite && c.End >= 0 && c.End < out.Start {
					return
				}
			}
			t.Fatalf("the result was printed (strace line %d) before the database's last write (line %d) was synced to disk", out.Start+1, lastWrite+1)
		})
	}
}

// The etcd store: the result is printed only after the answer to the ADD's
// commit (the transaction that puts the node's object) was read from
// etcd's connection. The plugin speaks gRPC over HTTP/2: the frames the
// plugin wrote and read are decoded from strace's log, the request and
// the answer with etcd's own generated messages.
func TestEtcdAddIsAcknowledgedBeforePrinted(t *testing.T) {
	strace := needStrace(t)
	srv := etcdtest.ForTest(t, nil)
	conf := fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"net1","type":"bridge","ipam":{"type":"ipkeeper",
		"datastore":{"type":"etcd","endpoints":[%q],"prefix":"/durability"},%s}}`, srv.Endpoint, ranges)
	lockDir := t.TempDir()
	for _, container := range []string{"c1", "c2"} {
		t.Run(container, func(t *testing.T) {
			calls, _ := tracedAdd(t, strace, container, conf, "IPKEEPER_LOCK_DIR="+lockDir)
			out := resultWrite(t, calls)
			// The commit: the last write before the result that sends a
			// transaction putting keys.
			commit, stream := -1, uint32(0)
			for i, c := range calls {
				if !c.IsWrite() || !strings.HasPrefix(c.Path, "TCP") || c.Start >= out.Start {
					continue
				}
				frames, _ := h2Frames(c.Data())
				for _, f := range frames {
					msg, ok := f.grpcMessage()
					var txn pb.TxnRequest
					if !ok || txn.Unmarshal(msg) != nil || len(txn.Success) == 0 {
						continue
					}
					if put := txn.Success[0].GetRequestPut(); put != nil && strings.HasPrefix(string(put.Key), "/durability/") {
						commit, stream = i, f.Stream
					}
				}
			}
			if commit < 0 {
				t.Fatal("strace shows no transaction with puts sent to etcd before the result: the test saw nothing to check")
			}
			req := calls[commit]
			// Its answer: the DATA frame of the commit's stream among the
			// bytes read from the same connection afterwards.
			var pending []byte
			for _, c := range calls[commit+1:] {
				if !c.IsRead() || c.FD != req.FD || c.Path != req.Path || !c.OK() {
					continue
				}
				var frames []h2Frame
				frames, pending = h2Frames(append(pending, c.Data()...))
				for _, f := range frames {
					msg, ok := f.grpcMessage()
					if !ok || f.Stream != stream {
						continue
					}
					if c.End < 0 || c.End > out.Start {
						t.Fatalf("the result was printed (strace line %d) before etcd's answer to the commit was read (line %d)", out.Start+1, c.End+1)
					}
					var resp pb.TxnResponse
					if err := resp.Unmarshal(msg); err != nil || !resp.Succeeded {
						t.Fatalf("etcd's answer to the commit does not say it succeeded: %+v, %v", resp, err)
					}
					return
				}
			}
			t.Fatalf("the result was printed (strace line %d) and no answer to the commit (line %d) was read before", out.Start+1, req.Start+1)
		})
	}
}
