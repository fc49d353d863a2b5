// Package install is ipkeeper-install, which runs in the ipkeeper-node
// DaemonSet and puts ipkeeper on a Kubernetes node: it copies the ipkeeper plugin into the
// host's CNI bin dir, writes the CNI config list and (for the pod-aware
// mode) a kubeconfig for the node's ServiceAccount into the host's CNI
// config dir, copies the datastore's TLS files next to it, and then keeps
// the kubeconfig, config and TLS files current (the projected token
// rotates; ConfigMap and Secret updates arrive as new files) until it is
// stopped. Every file is replaced atomically (write, fsync, rename), so a
// kubelet or runtime never reads half a file. In the host's dirs it never
// follows a symbolic link: a link (or anything but a regular file) where
// one of its files or its TLS dir goes is refused, naming the link, and
// nothing is changed; the dirs themselves must not be links (see
// openHostDir).
//
// The image holds only static binaries and no shell, so this is a Go
// program rather than a script. Every flag can also be given as an
// environment variable IPKEEPER_INSTALL_<FLAG> (upper case, "-" as "_"),
// e.g. IPKEEPER_INSTALL_UNINSTALL=true.
package install

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/flagenv"

	"github.com/spf13/pflag"
)

// Options are the installer's settings.
type Options struct {
	// cniBinDir and cniConfDir are the host's CNI dirs as mounted in the
	// container; hostConfDir is cniConfDir's path on the host, which the
	// files written there use to name each other.
	cniBinDir, cniConfDir, hostConfDir string
	// plugin is the plugin binary to install into cniBinDir.
	plugin string
	// pluginKube is the plugin's sibling for kubernetes datastores,
	// installed beside it as KubeSibling (default: KubeSibling next to
	// plugin).
	pluginKube string
	// conflist is the CNI config list to install ("" installs none),
	// under conflistName (default: its base name).
	conflist, conflistName string
	// kubeconfigName is the kubeconfig's file name in cniConfDir ("" writes
	// none); tokenFile and caFile are the ServiceAccount's projected token
	// and the cluster CA; server is the API server's URL.
	kubeconfigName, tokenFile, caFile, server string
	// tlsDir holds the datastore's TLS files (a Secret's mount), copied
	// into cniConfDir/tlsDirName; "" copies none.
	tlsDir string
	// nodeName replaces __KUBERNETES_NODE_NAME__ in the config.
	nodeName string
	// refresh is how often the token, CA, config and TLS files are checked.
	refresh time.Duration
	// once installs (or uninstalls) and exits instead of staying.
	once bool
	// uninstall removes what the installer installs instead.
	uninstall bool
}

// tlsDirName is the directory of the datastore's TLS files in cniConfDir.
const tlsDirName = "ipkeeper-tls"

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "IPKEEPER_INSTALL_"

// ParseFlags reads the installer's flags from args, each of which may
// also be given as the environment variable IPKEEPER_INSTALL_<FLAG>
// (getenv).
func ParseFlags(args []string, getenv func(string) string) (Options, error) {
	var o Options
	fs := pflag.NewFlagSet("ipkeeper-install", pflag.ContinueOnError)
	fs.StringVar(&o.cniBinDir, "cni-bin-dir", "/host/opt/cni/bin", "the host's CNI bin dir as mounted here")
	fs.StringVar(&o.cniConfDir, "cni-conf-dir", "/host/etc/cni/net.d", "the host's CNI config dir as mounted here")
	fs.StringVar(&o.hostConfDir, "host-cni-conf-dir", "/etc/cni/net.d", "the CNI config dir's path on the host")
	fs.StringVar(&o.plugin, "plugin", "/usr/local/bin/ipkeeper", "plugin binary to install")
	fs.StringVar(&o.pluginKube, "plugin-kube", "", "the plugin's sibling for kubernetes datastores, installed beside it as "+KubeSibling+" (default: "+KubeSibling+" next to --plugin)")
	fs.StringVar(&o.conflist, "conflist", "", "CNI config list to install (\"\" installs none)")
	fs.StringVar(&o.conflistName, "conflist-name", "", "file name of the installed config list (default: the base name of --conflist)")
	fs.StringVar(&o.kubeconfigName, "kubeconfig-name", "ipkeeper-kubeconfig", "file name of the plugin's kubeconfig in the CNI config dir (\"\" writes none)")
	fs.StringVar(&o.tokenFile, "token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token", "ServiceAccount token (projected, rotated by the kubelet)")
	fs.StringVar(&o.caFile, "ca-file", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "cluster CA certificate")
	fs.StringVar(&o.server, "server", "", "API server URL for the kubeconfig (default https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
	fs.StringVar(&o.tlsDir, "tls-dir", "", "directory of datastore TLS files to copy into <cni-conf-dir>/"+tlsDirName+" (\"\" copies none)")
	fs.StringVar(&o.nodeName, "node-name", "", "this node's name, replacing __KUBERNETES_NODE_NAME__ in the config (default $NODE_NAME)")
	fs.DurationVar(&o.refresh, "refresh", 10*time.Second, "how often to check the token, CA, config and TLS files for changes")
	fs.BoolVar(&o.once, "once", false, "install (or uninstall) and exit instead of staying to refresh")
	fs.BoolVar(&o.uninstall, "uninstall", false, "remove the plugin, config list, kubeconfig and TLS files instead of installing them")

	// Environment first, so flags given on the command line win.
	if err := flagenv.Set(fs, envPrefix, getenv); err != nil {
		return o, err
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.pluginKube == "" {
		o.pluginKube = filepath.Join(filepath.Dir(o.plugin), KubeSibling)
	}
	if o.nodeName == "" {
		o.nodeName = getenv("NODE_NAME")
	}
	if o.server == "" {
		host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
		if host != "" && port != "" {
			o.server = "https://" + joinHostPort(host, port)
		}
	}
	if o.conflist != "" && o.conflistName == "" {
		o.conflistName = baseName(o.conflist)
	}
	if o.refresh <= 0 {
		return o, fmt.Errorf("--refresh %v: must be positive", o.refresh)
	}
	for _, n := range []struct{ flag, v string }{{"--conflist-name", o.conflistName}, {"--kubeconfig-name", o.kubeconfigName}} {
		if strings.ContainsRune(n.v, '/') || n.v == "." || n.v == ".." {
			return o, fmt.Errorf("%s %q: must be a file name, not a path", n.flag, n.v)
		}
	}
	if o.kubeconfigName != "" && !o.uninstall && o.server == "" {
		return o, fmt.Errorf("--server is unset and so is $KUBERNETES_SERVICE_HOST/$KUBERNETES_SERVICE_PORT: the kubeconfig needs the API server's URL (or --kubeconfig-name=\"\" to write none)")
	}
	return o, nil
}

// Run installs (or uninstalls), then, unless once, refreshes every
// o.refresh until ctx ends.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	if o.uninstall {
		if err := uninstall(o, log); err != nil {
			return err
		}
		log.Info("uninstalled; waiting to be stopped")
	} else {
		if err := install(o, log); err != nil {
			return err
		}
		log.Info("installed", "plugin", o.plugin, "cniBinDir", o.cniBinDir, "cniConfDir", o.cniConfDir,
			"conflist", o.conflistName, "kubeconfig", o.kubeconfigName)
	}
	if o.once {
		return nil
	}
	t := time.NewTicker(o.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping", "reason", context.Cause(ctx))
			return nil
		case <-t.C:
			if o.uninstall {
				continue
			}
			if err := refresh(o, log); err != nil {
				// Keep what is installed; the next tick retries.
				log.Error("refresh failed", "err", err)
			}
		}
	}
}
