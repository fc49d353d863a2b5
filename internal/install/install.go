package install

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// Placeholders the installed config list may hold.
const (
	nodeNamePlaceholder   = "__KUBERNETES_NODE_NAME__"
	kubeconfigPlaceholder = "__KUBECONFIG_FILEPATH__"
)

// KubeSibling is the name the plugin looks for next to itself to serve
// configs whose datastore is the Kubernetes API (plugin.KubeBinary).
const KubeSibling = "ipkeeper-kube"

// installPlugin copies the plugin binary and its sibling KubeSibling into
// the CNI bin dir (0755), the sibling first: a plugin that can be run
// finds it there.
func installPlugin(o Options, log *slog.Logger) error {
	for _, b := range []struct{ src, name string }{{o.pluginKube, KubeSibling}, {o.plugin, filepath.Base(o.plugin)}} {
		changed, err := copyAtomic(b.src, o.cniBinDir, b.name, 0o755)
		if err != nil {
			return fmt.Errorf("install %s into %s as %s: %w", b.src, o.cniBinDir, b.name, err)
		}
		if changed {
			log.Info("plugin installed", "path", filepath.Join(o.cniBinDir, b.name))
		}
	}
	return nil
}

// refresh brings the kubeconfig, the TLS files and the config list up to
// date, in that order: the config names the other two, so they are in
// place before a runtime can read a config that names them.
func refresh(o Options, log *slog.Logger) error {
	if o.kubeconfigName != "" {
		data, err := renderKubeconfig(o)
		if err != nil {
			return err
		}
		changed, err := writeAtomic(o.cniConfDir, o.kubeconfigName, data, 0o600, nil)
		if err != nil {
			return fmt.Errorf("write kubeconfig: %w", err)
		}
		if changed {
			log.Info("kubeconfig written", "path", filepath.Join(o.cniConfDir, o.kubeconfigName), "server", o.server)
		}
	}
	if o.tlsDir != "" {
		if err := syncTLS(o, log); err != nil {
			return err
		}
	}
	if o.conflist != "" {
		src, err := os.ReadFile(o.conflist)
		if err != nil {
			return fmt.Errorf("read --conflist: %w", err)
		}
		data, err := substitute(o, src)
		if err != nil {
			return err
		}
		changed, err := writeAtomic(o.cniConfDir, o.conflistName, data, 0o644, checkConflist)
		if err != nil {
			return fmt.Errorf("install config list %s: %w", o.conflist, err)
		}
		if changed {
			log.Info("config list installed", "path", filepath.Join(o.cniConfDir, o.conflistName))
		}
	}
	return nil
}

// checkConflist refuses a config list ipkeeper would not accept: a broken
// config on a node fails every pod's ADD there.
func checkConflist(path string) error {
	if _, err := config.LoadFile(path); err != nil {
		return fmt.Errorf("refusing to install an invalid config list: %w", err)
	}
	return nil
}

// substitute fills in the placeholders of the config list.
func substitute(o Options, src []byte) ([]byte, error) {
	out := src
	if bytes.Contains(out, []byte(nodeNamePlaceholder)) {
		if o.nodeName == "" {
			return nil, fmt.Errorf("the config list holds %s but the node name is unknown (set --node-name or $NODE_NAME)", nodeNamePlaceholder)
		}
		out = bytes.ReplaceAll(out, []byte(nodeNamePlaceholder), []byte(o.nodeName))
	}
	if bytes.Contains(out, []byte(kubeconfigPlaceholder)) {
		if o.kubeconfigName == "" {
			return nil, fmt.Errorf("the config list holds %s but no kubeconfig is written (--kubeconfig-name is empty)", kubeconfigPlaceholder)
		}
		out = bytes.ReplaceAll(out, []byte(kubeconfigPlaceholder), []byte(filepath.Join(o.hostConfDir, o.kubeconfigName)))
	}
	return out, nil
}

// kubeconfig is the subset of the kubeconfig format the plugin needs.
type kubeconfig struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []namedCluster `json:"clusters"`
	Users          []namedUser    `json:"users"`
	Contexts       []namedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

type namedCluster struct {
	Name    string `json:"name"`
	Cluster struct {
		Server                   string `json:"server"`
		CertificateAuthorityData []byte `json:"certificate-authority-data"`
	} `json:"cluster"`
}

type namedUser struct {
	Name string `json:"name"`
	User struct {
		Token string `json:"token"`
	} `json:"user"`
}

type namedContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster string `json:"cluster"`
		User    string `json:"user"`
	} `json:"context"`
}

// renderKubeconfig builds the plugin's kubeconfig from the current token
// and CA files.
func renderKubeconfig(o Options) ([]byte, error) {
	tok, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("read --token-file: %w", err)
	}
	token := strings.TrimSpace(string(tok))
	if token == "" {
		return nil, fmt.Errorf("--token-file %s is empty", o.tokenFile)
	}
	ca, err := os.ReadFile(o.caFile)
	if err != nil {
		return nil, fmt.Errorf("read --ca-file: %w", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", o.caFile)
	}
	kc := kubeconfig{APIVersion: "v1", Kind: "Config", CurrentContext: "ipkeeper"}
	var c namedCluster
	c.Name = "kubernetes"
	c.Cluster.Server = o.server
	c.Cluster.CertificateAuthorityData = ca
	var u namedUser
	u.Name = "ipkeeper-node"
	u.User.Token = token
	var x namedContext
	x.Name = "ipkeeper"
	x.Context.Cluster, x.Context.User = c.Name, u.Name
	kc.Clusters, kc.Users, kc.Contexts = []namedCluster{c}, []namedUser{u}, []namedContext{x}
	return yaml.Marshal(kc)
}

// syncTLS makes cniConfDir/tlsDirName hold exactly the files of tlsDir
// (directory 0700, files 0600).
func syncTLS(o Options, log *slog.Logger) error {
	files, err := readDirFiles(o.tlsDir)
	if err != nil {
		return fmt.Errorf("read --tls-dir: %w", err)
	}
	dst := filepath.Join(o.cniConfDir, tlsDirName)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dst, 0o700); err != nil {
		return err
	}
	for name, data := range files {
		changed, err := writeAtomic(dst, name, data, 0o600, nil)
		if err != nil {
			return fmt.Errorf("copy TLS file %s: %w", name, err)
		}
		if changed {
			log.Info("TLS file written", "path", filepath.Join(dst, name))
		}
	}
	have, err := os.ReadDir(dst)
	if err != nil {
		return err
	}
	for _, e := range have {
		if _, keep := files[e.Name()]; !keep {
			if err := os.RemoveAll(filepath.Join(dst, e.Name())); err != nil {
				return err
			}
			log.Info("stale TLS file removed", "path", filepath.Join(dst, e.Name()))
		}
	}
	return nil
}

// uninstall removes what install writes: the plugin and its sibling, the config list, the
// kubeconfig and the TLS directory. Pods still attached through ipkeeper
// need the plugin for their DEL, so this runs only when they are gone.
func uninstall(o Options, log *slog.Logger) error {
	paths := []string{filepath.Join(o.cniBinDir, filepath.Base(o.plugin)), filepath.Join(o.cniBinDir, KubeSibling)}
	if o.conflistName != "" {
		paths = append(paths, filepath.Join(o.cniConfDir, o.conflistName))
	}
	if o.kubeconfigName != "" {
		paths = append(paths, filepath.Join(o.cniConfDir, o.kubeconfigName))
	}
	if o.tlsDir != "" {
		paths = append(paths, filepath.Join(o.cniConfDir, tlsDirName))
	}
	var errs []error
	for _, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("removed", "path", p)
	}
	return errors.Join(errs...)
}
