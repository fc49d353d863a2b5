package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipkeeper/ipkeeper/internal/plugin"
	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

// TestServeCNIParsesOnce: a pod-aware usePodCidr ADD served by the
// agent (serveCNI, in process, against the API server with the node's
// credentials) parses its config once: Validate's parse serves the
// checks, the verb and the node's pod CIDR, filled into the parsed value.
func TestServeCNIParsesOnce(t *testing.T) {
	f := fixture(t, "parseonce")
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.NodeKubeconfig(t, f.nodeA))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Not started: lookups read the API server.
	a := New(cs, f.nodeA, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.EnableCNI(cfg)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	conf := cniConf(t, "1.1.0", f.nodeA, f.ns, sock,
		map[string]any{"ranges": []any{[]any{map[string]any{"subnet": "usePodCidr"}}}}, nil)
	body, err := json.Marshal(podinfo.CNIRequest{Command: "ADD", ContainerID: "p1", IfName: "eth0",
		NetNS: "/var/run/netns/ipk-absent-p1", Path: "/opt/cni/bin", Stdin: conf})
	if err != nil {
		t.Fatal(err)
	}
	before := plugin.ParseCount()
	w := httptest.NewRecorder()
	a.serveCNI(w, httptest.NewRequestWithContext(ctxT(t), http.MethodPost, podinfo.AgentCNIPath, bytes.NewReader(body)))
	n := plugin.ParseCount() - before
	var ans podinfo.CNIAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &ans); w.Code != http.StatusOK || err != nil || ans.Error != nil {
		t.Fatalf("ADD: %d %s", w.Code, w.Body)
	}
	if !strings.Contains(string(ans.Stdout), "10.244.1.") {
		t.Errorf("result %s holds no address of the node's pod CIDR 10.244.1.0/24", ans.Stdout)
	}
	if n != 1 {
		t.Errorf("the agent parsed the ADD's config %d times, want 1", n)
	}
}
