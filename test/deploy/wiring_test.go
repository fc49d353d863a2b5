package deploy

import (
	"encoding/json"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// typed decodes the deploy/ object of kind and name into out.
func typed(t *testing.T, kind, name string, out any) {
	t.Helper()
	for _, o := range manifests(t) {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s %s in deploy/", kind, name)
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// mountedFile resolves path inside a container to the volume and the key
// (file name) of the volume it reads.
func mountedFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, p string) (corev1.Volume, string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name {
				return v, rel
			}
		}
		t.Fatalf("container %s mounts unknown volume %s", c.Name, m.Name)
	}
	t.Fatalf("container %s reads %s, which no volume mount holds", c.Name, p)
	return corev1.Volume{}, ""
}

// TestManifestWiring checks that the pieces of deploy/ fit each other:
// each container reads the ConfigMap key and the Secret mount it is told
// to, the DaemonSet writes into the host's CNI dirs where the installer
// looks, the config list names the files where the installer puts them,
// and the controller's and installer's arguments are flags they have.
func TestManifestWiring(t *testing.T) {
	var cm corev1.ConfigMap
	typed(t, "ConfigMap", "ipkeeper-config", &cm)
	var ds appsv1.DaemonSet
	typed(t, "DaemonSet", "ipkeeper-node", &ds)
	var dep appsv1.Deployment
	typed(t, "Deployment", "ipkeeper-controller", &dep)

	t.Run("DaemonSet", func(t *testing.T) {
		spec := ds.Spec.Template.Spec
		if spec.ServiceAccountName != "ipkeeper-node" || !spec.HostNetwork {
			t.Errorf("serviceAccountName %q hostNetwork %v, want ipkeeper-node and true (the node has no pod network yet)", spec.ServiceAccountName, spec.HostNetwork)
		}
		if len(spec.Containers) != 2 || spec.Containers[0].Name != "install" || spec.Containers[1].Name != "agent" {
			t.Fatalf("containers %v, want install and agent", containerNames(spec))
		}
		c := spec.Containers[0]
		if c.SecurityContext == nil || c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser != 0 {
			t.Error("the installer must run as root (uid 0) explicitly: the image's user is non-root")
		}
		conflist, ok := flagValue(c.Args, "conflist")
		if !ok {
			t.Fatal("installer has no --conflist")
		}
		v, key := mountedFile(t, spec, c, conflist)
		if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || cm.Data[key] == "" {
			t.Errorf("--conflist=%s is not a key of ConfigMap %s (volume %+v, key %q)", conflist, cm.Name, v.VolumeSource, key)
		}
		tlsDir := tlsDirOf(t, ds)
		if v, rel := mountedFile(t, spec, c, tlsDir); v.Secret == nil || v.Secret.SecretName != "ipkeeper-etcd-tls" || rel != "." ||
			v.Secret.Optional == nil || !*v.Secret.Optional {
			t.Errorf("--tls-dir=%s is not the optional Secret ipkeeper-etcd-tls mount", tlsDir)
		}
		// The installer's defaults: host dirs mounted at /host/...
		for hostPath, mount := range map[string]string{"/opt/cni/bin": "/host/opt/cni/bin", "/etc/cni/net.d": "/host/etc/cni/net.d"} {
			v, rel := mountedFile(t, spec, c, mount)
			if v.HostPath == nil || v.HostPath.Path != hostPath || rel != "." {
				t.Errorf("%s is not the host's %s", mount, hostPath)
			}
		}
		if e := envVar(c, "NODE_NAME"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Error("NODE_NAME is not the downward API's spec.nodeName")
		}
		// The node's credentials are the pod's own projected token, bound
		// to the pod and naming its node (deploy/'s node-writes policy
		// needs it): the installer writes the host's kubeconfig from it
		// (--token-file, by default where the kubelet mounts it), the agent
		// uses it in-cluster, and nothing is mounted over it.
		const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
		if spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken {
			t.Error("automountServiceAccountToken is false: the node has no pod-bound token")
		}
		if tf, ok := flagValue(c.Args, "token-file"); ok && tf != saDir+"/token" {
			t.Errorf("the installer's --token-file=%s is not the pod's projected token", tf)
		}
		for _, ct := range spec.Containers {
			for _, m := range ct.VolumeMounts {
				if m.MountPath == saDir || strings.HasPrefix(saDir, strings.TrimSuffix(m.MountPath, "/")+"/") {
					t.Errorf("container %s mounts %s over the pod's projected token", ct.Name, m.MountPath)
				}
			}
			if v, ok := flagValue(ct.Args, "kubeconfig"); ok {
				t.Errorf("container %s: --kubeconfig=%s instead of the pod's own token", ct.Name, v)
			}
		}
	})

	t.Run("agent", func(t *testing.T) {
		spec := ds.Spec.Template.Spec
		if len(spec.Containers) < 2 {
			t.Fatal("no agent container")
		}
		c := spec.Containers[1]
		if c.SecurityContext == nil || c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser != 0 {
			t.Error("the agent must run as root (uid 0) explicitly: its socket is root's, 0600, for the plugin, which runs as root")
		}
		socket, ok := flagValue(c.Args, "socket")
		if !ok {
			t.Fatal("the agent has no --socket")
		}
		_, data := shippedConflist(t)
		var raw conflistKubernetes
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		if len(raw.Plugins) == 0 || raw.Plugins[0].IPAM.Kubernetes.AgentSocket != socket {
			t.Errorf("the config list's ipam.kubernetes.agentSocket is not the agent's --socket=%s: %+v", socket, raw.Plugins)
		}
		// The plugin runs on the host: the socket's directory must be the
		// same path on the host as in the container.
		v, rel := mountedFile(t, spec, c, path.Dir(socket))
		if v.HostPath == nil || v.HostPath.Path != path.Dir(socket) || rel != "." {
			t.Errorf("%s is not a hostPath mount of the host's %s (volume %+v)", path.Dir(socket), path.Dir(socket), v.VolumeSource)
		}
		if e := envVar(c, "NODE_NAME"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Error("the agent's NODE_NAME is not the downward API's spec.nodeName")
		}
		p := c.ReadinessProbe
		if p == nil || p.Exec == nil || len(p.Exec.Command) == 0 || p.Exec.Command[0] != c.Command[0] ||
			!slices.Contains(p.Exec.Command, "--probe") || !slices.Contains(p.Exec.Command, "--socket="+socket) {
			t.Errorf("readiness probe %+v, want %s --probe --socket=%s", p, c.Command, socket)
		}
		help := helpText(t, static(t, "cmd/ipkeeper-agent"))
		for _, a := range append(slices.Clone(c.Args), p.Exec.Command[1:]...) {
			checkFlag(t, "ipkeeper-agent", help, a)
		}
	})

	t.Run("config list", func(t *testing.T) {
		key, data := shippedConflist(t)
		ipam := loadConflist(t, key, data)
		// The cluster's own API: no etcd to run by default.
		if ipam.Datastore.Type != config.DatastoreKubernetes {
			t.Errorf("the shipped config's datastore is %q, want %q (the cluster's own API; etcd is the documented alternative)",
				ipam.Datastore.Type, config.DatastoreKubernetes)
		}
		// The plugin on the host authenticates with the kubeconfig the
		// installer writes there, for the datastore as for pod-aware
		// lookups when the agent cannot be reached.
		hostKubeconfig := installerKubeconfig(t, ds.Spec.Template.Spec)
		if ipam.Datastore.Kubeconfig != hostKubeconfig {
			t.Errorf("the datastore's kubeconfig %q is not the installer's kubeconfig on the host (%s)", ipam.Datastore.Kubeconfig, hostKubeconfig)
		}
		checkTLSFiles(t, ds.Spec.Template.Spec, ipam.Datastore)
		var raw conflistKubernetes
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		if len(raw.Plugins) == 0 || raw.Plugins[0].IPAM.Kubernetes.Kubeconfig != hostKubeconfig {
			t.Errorf("ipam.kubernetes.kubeconfig is not the installer's kubeconfig on the host (%s): %+v", hostKubeconfig, raw.Plugins)
		}
	})

	t.Run("etcd alternative", func(t *testing.T) {
		// The etcd datastore config.yaml's comment offers, put in place
		// of the shipped one, is valid and names the TLS files where the
		// installer copies the Secret its comment creates.
		key, data := shippedConflist(t)
		snippet, secret := etcdAlternative(t)
		var list map[string]any
		if err := json.Unmarshal(data, &list); err != nil {
			t.Fatal(err)
		}
		plugins, _ := list["plugins"].([]any)
		if len(plugins) == 0 {
			t.Fatal("the shipped config list has no plugins")
		}
		first, _ := plugins[0].(map[string]any)
		ipamRaw, _ := first["ipam"].(map[string]any)
		if ipamRaw == nil {
			t.Fatal("the shipped config list has no plugins[0].ipam")
		}
		ipamRaw["datastore"] = snippet
		edited, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		ipam := loadConflist(t, key, edited)
		if ipam.Datastore.Type != config.DatastoreEtcd || len(ipam.Datastore.Endpoints) == 0 {
			t.Errorf("config.yaml's etcd snippet gives datastore %+v, want etcd with endpoints", ipam.Datastore)
		}
		if ipam.Datastore.CAFile == "" || ipam.Datastore.CertFile == "" || ipam.Datastore.KeyFile == "" {
			t.Errorf("config.yaml's etcd snippet names no TLS files: %+v", ipam.Datastore)
		}
		checkTLSFiles(t, ds.Spec.Template.Spec, ipam.Datastore)
		for what, name := range map[string]string{"the installer's --tls-dir": tlsSecretOf(t, ds.Spec.Template.Spec, ds.Spec.Template.Spec.Containers[0], tlsDirOf(t, ds)),
			"the controller's": tlsSecretOf(t, dep.Spec.Template.Spec, dep.Spec.Template.Spec.Containers[0], path.Dir(ipam.Datastore.CAFile))} {
			if name != secret {
				t.Errorf("config.yaml's comment creates Secret %q, but %s mount is Secret %q", secret, what, name)
			}
		}
	})

	t.Run("datastore RBAC", func(t *testing.T) {
		// The node's and the controller's ServiceAccounts, as the
		// workloads name them, are bound to the datastore's ClusterRole
		// (what it grants: rbac_test.go).
		var crb rbacv1.ClusterRoleBinding
		typed(t, "ClusterRoleBinding", "ipkeeper-datastore", &crb)
		if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "ipkeeper-datastore" {
			t.Errorf("ClusterRoleBinding ipkeeper-datastore binds %+v, want ClusterRole ipkeeper-datastore", crb.RoleRef)
		}
		for _, w := range []struct {
			what, namespace, account string
		}{{"DaemonSet " + ds.Name, ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName},
			{"Deployment " + dep.Name, dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName}} {
			if !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == "ServiceAccount" && s.Name == w.account && s.Namespace == w.namespace
			}) {
				t.Errorf("%s runs as ServiceAccount %s/%s, which ClusterRoleBinding ipkeeper-datastore does not bind (subjects %+v)",
					w.what, w.namespace, w.account, crb.Subjects)
			}
		}
	})

	t.Run("Deployment", func(t *testing.T) {
		spec := dep.Spec.Template.Spec
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
			t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
		}
		if spec.ServiceAccountName != "ipkeeper-controller" {
			t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
		}
		c := spec.Containers[0]
		if got, _ := flagValue(c.Args, "leader-elect"); got != "true" {
			t.Errorf("--leader-elect=%q, want true", got)
		}
		if got, _ := flagValue(c.Args, "metrics-addr"); got != ":9273" {
			t.Errorf("--metrics-addr=%q, want :9273", got)
		}
		if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9273 || c.Ports[0].Name != "metrics" {
			t.Errorf("ports %+v, want metrics 9273", c.Ports)
		}
		for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "metrics" {
				t.Errorf("probe %+v, want GET %s on port metrics", probe, want)
			}
		}
		conf, _ := flagValue(c.Args, "config")
		if v, key := mountedFile(t, spec, c, conf); v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || cm.Data[key] == "" {
			t.Errorf("--config=%s is not a key of ConfigMap %s", conf, cm.Name)
		}
		if v, rel := mountedFile(t, spec, c, "/etc/cni/net.d/ipkeeper-tls"); v.Secret == nil || v.Secret.SecretName != "ipkeeper-etcd-tls" || rel != "." ||
			v.Secret.Optional == nil || !*v.Secret.Optional {
			t.Error("the controller does not mount the optional Secret ipkeeper-etcd-tls where an etcd datastore names the TLS files")
		}
		// The controller opens the kubernetes datastore with its own
		// credentials: in-cluster, as its ServiceAccount (the config's
		// kubeconfig is the node's and is not read).
		for _, f := range []string{"kubeconfig", "datastore-kubeconfig"} {
			if v, ok := flagValue(c.Args, f); ok {
				t.Errorf("--%s=%s: the controller should use its in-cluster ServiceAccount", f, v)
			}
		}
		if spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken {
			t.Error("automountServiceAccountToken is false: the controller has no in-cluster credentials")
		}
		if ns, _ := flagValue(c.Args, "lease-namespace"); ns != "$(POD_NAMESPACE)" || envVar(c, "POD_NAMESPACE") == nil {
			t.Errorf("--lease-namespace=%q, want $(POD_NAMESPACE) from the downward API (the Role is in the controller's namespace)", ns)
		}
	})

	t.Run("installer flags", func(t *testing.T) {
		help := helpText(t, static(t, "cmd/ipkeeper-install"))
		for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
			checkFlag(t, "ipkeeper-install", help, a)
		}
	})

	t.Run("controller flags", func(t *testing.T) {
		needPackage(t, "cmd/ipkeeper-controller")
		help := helpText(t, static(t, "cmd/ipkeeper-controller"))
		for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
			checkFlag(t, "ipkeeper-controller", help, a)
		}
	})
}

// conflistKubernetes is the config list's ipam.kubernetes.
type conflistKubernetes struct {
	Plugins []struct {
		IPAM struct {
			Kubernetes struct {
				Kubeconfig  string `json:"kubeconfig"`
				AgentSocket string `json:"agentSocket"`
			} `json:"kubernetes"`
		} `json:"ipam"`
	} `json:"plugins"`
}

func containerNames(spec corev1.PodSpec) []string {
	var out []string
	for _, c := range spec.Containers {
		out = append(out, c.Name)
	}
	return out
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// helpText returns what bin --help prints (stdout and stderr; pflag
// exits 0 or 2 for --help depending on the program).
func helpText(t *testing.T, bin string) string {
	t.Helper()
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(out), "--") {
		t.Fatalf("%s --help printed no flags:\n%s", bin, out)
	}
	return string(out)
}

func checkFlag(t *testing.T, bin, help, arg string) {
	t.Helper()
	name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
	if !strings.HasPrefix(arg, "--") || !strings.Contains(help, "--"+name+" ") && !strings.Contains(help, "--"+name+"\n") {
		t.Errorf("%s has no flag for argument %q", bin, arg)
	}
}
