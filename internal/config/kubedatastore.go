package config

import (
	"path/filepath"
)

// finishKubernetes validates a kubernetes datastore: a kubeconfig path
// (absolute; none means the in-cluster configuration), an optional
// partition, and none of etcd's keys — a leftover endpoint would mean
// the user thinks the state is in etcd. A local path is ignored, as etcd
// ignores it.
func (d *Datastore) finishKubernetes(k datastoreKeys) error {
	for _, f := range []struct {
		key string
		set bool
	}{{k.endpoints, len(d.Endpoints) != 0}, {k.ca, d.CAFile != ""},
		{k.cert, d.CertFile != ""}, {k.key, d.KeyFile != ""}} {
		if f.set {
			return invalid(f.key, "is set but %s is %q, which keeps the state in the Kubernetes API; remove it, or choose %q or %q",
				k.typ, DatastoreKubernetes, DatastoreLocal, DatastoreEtcd)
		}
	}
	if d.Kubeconfig != "" && !filepath.IsAbs(d.Kubeconfig) {
		return invalid(k.kubeconfig, "%s is not an absolute path", quote(d.Kubeconfig))
	}
	if d.Kubeconfig != "" {
		d.Kubeconfig = filepath.Clean(d.Kubeconfig)
	}
	if d.Prefix != "" && !isDNSLabel(d.Prefix) {
		return invalid(k.kubePrefix, "%s is not a DNS label (at most 63 characters of a-z, 0-9 and \"-\", starting and ending with a letter or digit)", quote(d.Prefix))
	}
	return nil
}

// isDNSLabel reports whether s is an RFC 1123 label, as Kubernetes
// requires of a label value used as a name part.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
