package install

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/safefs"
)

// Placeholders the installed config list may hold.
const (
	nodeNamePlaceholder   = "__KUBERNETES_NODE_NAME__"
	kubeconfigPlaceholder = "__KUBECONFIG_FILEPATH__"
)

// KubeSibling is the name the plugin looks for next to itself to serve
// configs whose datastore is the Kubernetes API (plugin.KubeBinary).
const KubeSibling = "ipkeeper-kube"

// install installs the plugin, then the files of refresh. It checks the
// config dir first, so that a link planted there changes nothing at all.
func install(o Options, log *slog.Logger) error {
	conf, err := openHostDir("--cni-conf-dir", o.cniConfDir)
	if err != nil {
		return err
	}
	err = checkConf(o, conf)
	_ = conf.Close()
	if err != nil {
		return err
	}
	if err := installPlugin(o, log); err != nil {
		return err
	}
	return refresh(o, log)
}

// installPlugin copies the plugin binary and its sibling KubeSibling into
// the CNI bin dir (0755), the sibling first: a plugin that can be run
// finds it there. A link or anything but a regular file in the place of
// either is refused before either is copied.
func installPlugin(o Options, log *slog.Logger) error {
	bin, err := openHostDir("--cni-bin-dir", o.cniBinDir)
	if err != nil {
		return err
	}
	defer bin.Close()
	plugins := []struct{ src, name string }{{o.pluginKube, KubeSibling}, {o.plugin, filepath.Base(o.plugin)}}
	for _, b := range plugins {
		if err := checkFile(bin, b.name); err != nil {
			return fmt.Errorf("install %s: %w", b.name, err)
		}
	}
	for _, b := range plugins {
		changed, err := copyAtomic(b.src, bin, b.name, 0o755)
		if err != nil {
			return fmt.Errorf("install %s into %s as %s: %w", b.src, bin.Path(), b.name, err)
		}
		if changed {
			log.Info("plugin installed", "path", bin.Join(b.name))
		}
	}
	return nil
}

// checkConf refuses, before anything is written, a link or anything but
// a regular file where the kubeconfig or the config list goes, and a TLS
// dir that is a link or holds anything but regular files.
func checkConf(o Options, conf *safefs.Dir) error {
	for _, n := range []struct{ what, name string }{{"kubeconfig", o.kubeconfigName}, {"config list", o.conflistName}} {
		if n.name == "" {
			continue
		}
		if err := checkFile(conf, n.name); err != nil {
			return fmt.Errorf("%s: %w", n.what, err)
		}
	}
	if o.tlsDir != "" {
		if err := checkTLSDir(conf); err != nil {
			return fmt.Errorf("TLS dir: %w", err)
		}
	}
	return nil
}

// refresh brings the kubeconfig, the TLS files and the config list up to
// date, in that order: the config names the other two, so they are in
// place before a runtime can read a config that names them.
func refresh(o Options, log *slog.Logger) error {
	conf, err := openHostDir("--cni-conf-dir", o.cniConfDir)
	if err != nil {
		return err
	}
	defer conf.Close()
	if err := checkConf(o, conf); err != nil {
		return err
	}
	if o.kubeconfigName != "" {
		data, err := renderKubeconfig(o)
		if err != nil {
			return err
		}
		changed, err := writeAtomic(conf, o.kubeconfigName, data, 0o600, nil)
		if err != nil {
			return fmt.Errorf("write kubeconfig: %w", err)
		}
		if changed {
			log.Info("kubeconfig written", "path", conf.Join(o.kubeconfigName), "server", o.server)
		}
	}
	if o.tlsDir != "" {
		if err := syncTLS(o, conf, log); err != nil {
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
		changed, err := writeAtomic(conf, o.conflistName, data, 0o644, checkConflist)
		if err != nil {
			return fmt.Errorf("install config list %s: %w", o.conflist, err)
		}
		if changed {
			log.Info("config list installed", "path", conf.Join(o.conflistName))
		}
	}
	return nil
}

// checkConflist refuses a config list ipkeeper would not accept: a broken
// config on a node fails every pod's ADD there. It reads the new file f
// through its descriptor, not its name.
func checkConflist(f *os.File) error {
	p := procPath(f)
	if _, err := config.LoadFile(p); err != nil {
		if inner := errors.Unwrap(err); inner != nil && strings.HasPrefix(err.Error(), p+": ") {
			err = inner // the /proc path says nothing to the reader
		}
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

// syncTLS makes conf/tlsDirName hold exactly the files of tlsDir
// (directory 0700, files 0600). checkConf has refused a link in its place
// or in it.
func syncTLS(o Options, conf *safefs.Dir, log *slog.Logger) error {
	files, err := readDirFiles(o.tlsDir)
	if err != nil {
		return fmt.Errorf("read --tls-dir: %w", err)
	}
	if err := conf.Mkdir(tlsDirName, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	dst, err := conf.OpenDir(tlsDirName)
	if err != nil {
		return fmt.Errorf("TLS dir: %w", err)
	}
	defer dst.Close()
	if err := dst.Chmod(0o700); err != nil {
		return err
	}
	for name, data := range files {
		changed, err := writeAtomic(dst, name, data, 0o600, nil)
		if err != nil {
			return fmt.Errorf("copy TLS file %s: %w", name, err)
		}
		if changed {
			log.Info("TLS file written", "path", dst.Join(name))
		}
	}
	have, err := dst.Names()
	if err != nil {
		return err
	}
	for _, name := range have {
		if _, keep := files[name]; keep {
			continue
		}
		if err := dst.Remove(name); err != nil {
			return fmt.Errorf("remove stale TLS file: %w", err)
		}
		log.Info("stale TLS file removed", "path", dst.Join(name))
	}
	return nil
}
