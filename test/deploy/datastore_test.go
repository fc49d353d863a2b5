package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	_ "github.com/ipkeeper/ipkeeper/internal/datastore/kubeopen" // the kubernetes datastore
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/testenv"
)

// loadConflist parses a config list as the plugin and the controller do.
func loadConflist(t *testing.T, key string, data []byte) *config.IPAM {
	t.Helper()
	f := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	conf, err := config.LoadFile(f)
	if err != nil {
		t.Fatalf("the config list is not valid for ipkeeper: %v", err)
	}
	return conf
}

// hostConfDir is the host's CNI config dir the installer writes into: the
// hostPath volume mounted at its --cni-conf-dir, which must also be its
// --host-cni-conf-dir (the installer's defaults when not given).
func hostConfDir(t *testing.T, spec corev1.PodSpec) string {
	t.Helper()
	c := spec.Containers[0]
	dir, ok := flagValue(c.Args, "cni-conf-dir")
	if !ok {
		dir = "/host/etc/cni/net.d"
	}
	v, rel := mountedFile(t, spec, c, dir)
	if v.HostPath == nil || rel != "." {
		t.Fatalf("the installer's --cni-conf-dir %s is not a hostPath mount (%+v)", dir, v.VolumeSource)
	}
	host, ok := flagValue(c.Args, "host-cni-conf-dir")
	if !ok {
		host = "/etc/cni/net.d"
	}
	if host != v.HostPath.Path {
		t.Fatalf("the installer's --host-cni-conf-dir %s is not the host dir it writes into (%s)", host, v.HostPath.Path)
	}
	return host
}

// installerKubeconfig is the host path of the kubeconfig the installer
// writes for the ipkeeper-node ServiceAccount.
func installerKubeconfig(t *testing.T, spec corev1.PodSpec) string {
	t.Helper()
	name, ok := flagValue(spec.Containers[0].Args, "kubeconfig-name")
	if !ok {
		name = "ipkeeper-kubeconfig"
	}
	if name == "" {
		t.Fatal("the installer writes no kubeconfig (--kubeconfig-name=\"\")")
	}
	return path.Join(hostConfDir(t, spec), name)
}

// checkTLSFiles checks that a datastore's TLS files, if any, are where the
// installer copies the Secret on the host (<host conf dir>/ipkeeper-tls).
func checkTLSFiles(t *testing.T, spec corev1.PodSpec, ds config.Datastore) {
	t.Helper()
	want := path.Join(hostConfDir(t, spec), "ipkeeper-tls")
	for _, p := range []string{ds.CAFile, ds.CertFile, ds.KeyFile} {
		if p != "" && path.Dir(p) != want {
			t.Errorf("datastore TLS file %s is not where the installer copies the Secret (%s)", p, want)
		}
	}
}

// tlsDirOf is the installer's --tls-dir.
func tlsDirOf(t *testing.T, ds appsv1.DaemonSet) string {
	t.Helper()
	dir, ok := flagValue(ds.Spec.Template.Spec.Containers[0].Args, "tls-dir")
	if !ok {
		t.Fatal("the installer has no --tls-dir")
	}
	return dir
}

// tlsSecretOf is the name of the Secret container c mounts at dir ("" when
// the volume is no Secret).
func tlsSecretOf(t *testing.T, spec corev1.PodSpec, c corev1.Container, dir string) string {
	t.Helper()
	v, _ := mountedFile(t, spec, c, dir)
	if v.Secret == nil {
		return ""
	}
	return v.Secret.SecretName
}

// etcdAlternative reads, from deploy/config.yaml's comments, the etcd
// "datastore" object offered instead of the shipped one and the Secret the
// `kubectl create secret generic` command there creates.
func etcdAlternative(t *testing.T) (ds any, secret string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir(t), "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var snippet []string
	for _, line := range strings.Split(string(b), "\n") {
		text, comment := strings.CutPrefix(line, "#")
		if !comment {
			if snippet != nil {
				break
			}
			continue
		}
		trimmed := strings.TrimSpace(text)
		if snippet == nil && trimmed == `"datastore": {` {
			snippet = []string{}
		}
		if snippet == nil {
			continue
		}
		snippet = append(snippet, text)
		if strings.HasPrefix(trimmed, "}") {
			break
		}
	}
	if len(snippet) == 0 {
		t.Fatal(`deploy/config.yaml has no commented "datastore": { ... } for etcd`)
	}
	var obj map[string]any
	js := "{" + strings.TrimSuffix(strings.TrimSpace(strings.Join(snippet, "\n")), ",") + "}"
	if err := json.Unmarshal([]byte(js), &obj); err != nil {
		t.Fatalf("deploy/config.yaml's commented datastore is not JSON: %v\n%s", err, js)
	}
	m := regexp.MustCompile(`create secret generic ([a-z0-9.-]+)`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("deploy/config.yaml does not say how to create the etcd TLS Secret")
	}
	return obj["datastore"], m[1]
}

// TestShippedDatastoreEndToEnd runs the shipped config list on the
// kubernetes datastore as deploy/ wires it, against a real kube-apiserver
// with deploy/'s CRDs, RBAC and node-writes policy: the installer writes
// the node's kubeconfig from the pod-bound token it is given; the
// installed plugin, with no agent at its socket, ADDs two pods through
// that kubeconfig (as ipkeeper-node on that node) into the CRDs; then the
// controller binary, given the ConfigMap's config list unchanged (whose
// kubeconfig path is the node's, which it does not have) and the
// controller ServiceAccount's kubeconfig standing in for its in-cluster
// credentials, releases the address of the pod deleted from the API and
// keeps the live pod's; and ipkeeperctl on an admin's machine, with the
// same config list and --datastore-kubeconfig (README's import step),
// shows the live pod's address. The test's host paths stand in for
// /etc/cni/net.d and the agent's socket.
func TestShippedDatastoreEndToEnd(t *testing.T) {
	s := server(t)
	needPackage(t, "cmd/ipkeeper-controller")
	controller := static(t, "cmd/ipkeeper-controller")
	ctl := static(t, "cmd/ipkeeperctl")
	h := newHost(t, s)
	ns := fmt.Sprintf("shipped-ds-%d", time.Now().UnixNano()%1e6)
	node := "node-" + ns
	// The token the kubelet projects into the DaemonSet's pod on the node
	// (the installer's --token-file): bound to the pod, it carries the
	// node, which deploy/'s node-writes policy requires of a node's writes.
	writeFile(t, h.tokenFile, []byte(s.NodeToken(t, node)), 0o600)
	h.runOnce(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	key, shipped := shippedConflist(t)
	installed, err := os.ReadFile(filepath.Join(h.conf, h.conflistName))
	if err != nil {
		t.Fatal(err)
	}
	var raw conflistKubernetes
	if err := json.Unmarshal(installed, &raw); err != nil || len(raw.Plugins) == 0 {
		t.Fatalf("the installed config list: %v", err)
	}
	// The node's paths, in the test's host directories.
	local := bytes.ReplaceAll(installed, []byte(`"/etc/cni/net.d/`), []byte(`"`+h.conf+"/"))
	local = bytes.ReplaceAll(local, []byte(`"`+raw.Plugins[0].IPAM.Kubernetes.AgentSocket+`"`),
		[]byte(`"`+filepath.Join(t.TempDir(), "no-agent.sock")+`"`))
	conf := loadConflist(t, key, local)
	if conf.Datastore.Type != config.DatastoreKubernetes || conf.Datastore.Kubeconfig != h.kubeconfigOut {
		t.Fatalf("the installed config's datastore %+v is not the kubernetes datastore with the kubeconfig the installer wrote (%s)",
			conf.Datastore, h.kubeconfigOut)
	}
	netConf := pluginConf(t, local)

	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	lockDir := t.TempDir()
	handles := map[string]string{} // pod -> handle ID
	addrs := map[string]string{}   // pod -> address
	for _, name := range []string{"gone", "live"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}}}
		p, err := s.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cid := "sandbox-" + name
		add := exec.CommandContext(ctx, filepath.Join(h.bin, "ipkeeper"))
		add.Env = append(withoutCNI(os.Environ()), "CNI_COMMAND=ADD", "CNI_CONTAINERID="+cid,
			"CNI_NETNS=/run/netns/ipk-deploy-never-entered", "CNI_IFNAME=eth0", "CNI_PATH="+h.bin,
			fmt.Sprintf("CNI_ARGS=K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", ns, name, p.UID),
			"NODENAME="+node, "IPKEEPER_LOCK_DIR="+lockDir)
		add.Stdin = bytes.NewReader(netConf)
		var stderr bytes.Buffer
		add.Stderr = &stderr
		out, err := add.Output()
		if err != nil {
			t.Fatalf("ADD %s with the installed config and no agent: %v\nstdout: %s\nstderr: %s", name, err, out, stderr.String())
		}
		var res struct {
			IPs []struct{ Address string } `json:"ips"`
		}
		if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address, "10.244.") {
			t.Fatalf("ADD %s printed %s (%v), want one address of 10.244.0.0/16", name, out, err)
		}
		handles[name] = ipam.HandleID("ipkeeper", cid, "eth0")
		addrs[name], _, _ = strings.Cut(res.IPs[0].Address, "/")
	}
	admin := config.Datastore{Type: config.DatastoreKubernetes, Kubeconfig: s.AdminKubeconfig,
		DialTimeout: config.DefaultDialTimeout, RequestTimeout: config.DefaultRequestTimeout}
	stored := storedHandles(t, ctx, admin)
	for name, id := range handles {
		if got, ok := stored[id]; !ok || got.Pod != name || got.Namespace != ns || got.Node != node {
			t.Fatalf("handle %s of pod %s in the CRDs: %+v (present %v)", id, name, got, ok)
		}
	}

	// The controller, as the Deployment runs it: --config is the
	// ConfigMap's file.
	confFile := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(confFile, shipped, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, controller, "--config="+confFile,
		"--kubeconfig="+s.ServiceAccountKubeconfig(t, "kube-system", "ipkeeper-controller"),
		"--leader-elect=false", "--metrics-addr=", "--map-addr=", "--leak-grace=0s", "--resync=200ms")
	var logs testenv.SyncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("controller after SIGTERM: %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the controller did not stop on SIGTERM:\n%s", logs.String())
		}
	}()
	waitLog := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if strings.Contains(logs.String(), "reconcile pass failed") {
				t.Fatalf("the controller's pass failed while waiting for %s:\n%s", what, logs.String())
			}
			select {
			case err := <-exited:
				exited <- err
				t.Fatalf("the controller exited (%v) while waiting for %s:\n%s", err, what, logs.String())
			case <-ctx.Done():
				t.Fatalf("%s never happened:\n%s", what, logs.String())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	waitLog("the controller's informers to sync", func() bool { return strings.Contains(logs.String(), "informers synced") })

	zero := int64(0)
	if err := s.Client.CoreV1().Pods(ns).Delete(ctx, "gone", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitLog("the deleted pod's address released", func() bool {
		_, ok := storedHandles(t, ctx, admin)[handles["gone"]]
		return !ok
	})
	// Passes run every 200 ms: a few more may not touch the live pod's.
	time.Sleep(time.Second)
	if _, ok := storedHandles(t, ctx, admin)[handles["live"]]; !ok {
		t.Fatalf("the live pod's address was released:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "reconcile pass failed") {
		t.Fatalf("a pass failed:\n%s", logs.String())
	}

	show := exec.CommandContext(ctx, ctl, "--config", confFile, "--datastore-kubeconfig", s.AdminKubeconfig, "ip", "show", addrs["live"], "-o", "json")
	out, err := show.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(handles["live"])) {
		t.Fatalf("ipkeeperctl --config (the ConfigMap's) --datastore-kubeconfig ip show %s: %v\n%s\nwant handle %s",
			addrs["live"], err, out, handles["live"])
	}
}

// pluginConf is the first plugin of a config list as the runtime hands it
// to the plugin: with the list's cniVersion and name.
func pluginConf(t *testing.T, list []byte) []byte {
	t.Helper()
	var l struct {
		CNIVersion string            `json:"cniVersion"`
		Name       string            `json:"name"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(list, &l); err != nil || len(l.Plugins) == 0 {
		t.Fatalf("config list: %v", err)
	}
	var p map[string]any
	if err := json.Unmarshal(l.Plugins[0], &p); err != nil {
		t.Fatal(err)
	}
	p["cniVersion"], p["name"] = l.CNIVersion, l.Name
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storedHandles returns the handles of datastore ds by ID.
func storedHandles(t *testing.T, ctx context.Context, ds config.Datastore) map[string]ipam.Handle {
	t.Helper()
	st, err := datastore.Open(ctx, ds, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hs, err := allocator.New(st, nil).Handles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ipam.Handle{}
	for _, h := range hs {
		out[h.ID] = h
	}
	return out
}

// withoutCNI is env without CNI_* variables.
func withoutCNI(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CNI_") {
			out = append(out, kv)
		}
	}
	return out
}
