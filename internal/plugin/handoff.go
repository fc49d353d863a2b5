package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
)

// KubeBinary is the plugin's sibling in the CNI bin directory that serves
// configs keeping their state in the Kubernetes API: the same plugin with
// the kubernetes datastore linked (cmd/ipkeeper-kube). The plugin itself
// does not link it: client-go's package initialization alone would make
// every exec several times slower to start (measured by
// internal/store/kube/initcost/measure.sh; docs/BENCHMARKS.md, "Plugin
// process costs"), which local and etcd users would pay on every ADD and
// DEL.
const KubeBinary = "ipkeeper-kube"

// kubeDatastore returns conf when it keeps its state in the Kubernetes
// API, else nil (also for a config that did not parse: the verb reports
// it).
func kubeDatastore(conf *config.IPAM) *config.IPAM {
	if conf == nil || conf.Datastore.Type != config.DatastoreKubernetes {
		return nil
	}
	return conf
}

// errNoKubeBinary: a config names the kubernetes datastore and KubeBinary
// is not installed next to the plugin.
var errNoKubeBinary = errors.New("the kubernetes datastore's plugin binary is not installed")

// handOff runs KubeBinary in place of this process, with the same
// arguments, environment and stdin, when conf (stdin parsed) names the
// kubernetes datastore and this binary cannot open it; it returns only
// when it does not apply (another datastore, a config the verbs will
// refuse themselves) or fails. early is Main's call, before the verb: a
// config that names the node's agent (ipam.kubernetes.agentSocket) is
// left to the verb, which forwards it to the agent and hands off only
// when the agent cannot serve it. KubeBinary learns h: the call's
// deadline, and why the agent did not serve the verb.
func handOff(conf *config.IPAM, stdin []byte, early bool, h handover) error {
	if datastore.KubernetesLinked() {
		return nil
	}
	conf = kubeDatastore(conf)
	if conf == nil || early && conf.AgentSocket != "" {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%w: finding the plugin's own path: %w", errNoKubeBinary, err)
	}
	path := filepath.Join(filepath.Dir(self), KubeBinary)
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		if err == nil {
			err = errors.New("not a regular file")
		}
		return fmt.Errorf("%w: the config keeps its state in the Kubernetes API, which %s next to the plugin serves: %w",
			errNoKubeBinary, path, err)
	}
	return execWithStdin(path, stdin, h.environ(os.Environ()))
}
