package config

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Datastore types and defaults.
const (
	DatastoreLocal = "local"
	DatastoreEtcd  = "etcd"
	// DatastoreKubernetes is the SPEC's CustomResource datastore (and
	// whereabouts' default).
	DatastoreKubernetes   = "kubernetes"
	DefaultLocalPath      = "/var/lib/cni/ipkeeper"
	DefaultEtcdPrefix     = "/ipkeeper"
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 10 * time.Second
)

// Datastore selects and configures the backend.
type Datastore struct {
	// Type is DatastoreLocal (the default), DatastoreEtcd or
	// DatastoreKubernetes.
	Type string
	// Path is, for local, the absolute directory holding ipkeeper.db
	// (default DefaultLocalPath).
	Path string
	// Endpoints lists etcd client URLs (or host:port); required for etcd.
	Endpoints []string
	// CAFile, CertFile and KeyFile are etcd TLS file paths; CertFile and
	// KeyFile come together.
	CAFile, CertFile, KeyFile string
	// Prefix is, for etcd, the key prefix (default DefaultEtcdPrefix),
	// starting with "/" and without a trailing "/"; for kubernetes, the
	// store's partition (a DNS label; empty: none).
	Prefix string
	// DialTimeout and RequestTimeout default to DefaultDialTimeout and
	// DefaultRequestTimeout. In JSON: Go duration strings ("5s") or
	// integer seconds.
	DialTimeout, RequestTimeout time.Duration
	// Kubeconfig is, for DatastoreKubernetes, the path of the kubeconfig
	// to authenticate with (for the plugin, the one the DaemonSet writes
	// for its ServiceAccount); empty means the in-cluster configuration.
	Kubeconfig string
}

// datastoreKeys names the sources of each Datastore field for messages.
type datastoreKeys struct {
	typ, path, endpoints, ca, cert, key, prefix, dial, request, kubeconfig string
	// kubePrefix names the partition of a kubernetes datastore.
	kubePrefix string
	// endpoint names the i-th endpoint.
	endpoint func(i int) string
}

// jsonDatastoreKeys names the keys of a datastore object found at key.
func jsonDatastoreKeys(key string) datastoreKeys {
	return datastoreKeys{typ: key + ".type", path: key + ".path", endpoints: key + ".endpoints",
		ca: key + ".caFile", cert: key + ".certFile", key: key + ".keyFile", prefix: key + ".prefix",
		dial: key + ".dialTimeout", request: key + ".requestTimeout", kubeconfig: key + ".kubeconfig",
		kubePrefix: key + ".prefix",
		endpoint:   func(i int) string { return fmt.Sprintf("%s.endpoints[%d]", key, i) }}
}

// envDatastoreKeys names the environment variables DatastoreFromEnv reads.
var envDatastoreKeys = datastoreKeys{typ: "IPKEEPER_DATASTORE", path: "IPKEEPER_LOCAL_PATH",
	endpoints: "IPKEEPER_ETCD_ENDPOINTS", ca: "IPKEEPER_ETCD_CA", cert: "IPKEEPER_ETCD_CERT",
	key: "IPKEEPER_ETCD_KEY", prefix: "IPKEEPER_ETCD_PREFIX",
	dial: "IPKEEPER_ETCD_DIAL_TIMEOUT", request: "IPKEEPER_ETCD_REQUEST_TIMEOUT",
	kubeconfig: "IPKEEPER_DATASTORE_KUBECONFIG", kubePrefix: "IPKEEPER_DATASTORE_PREFIX",
	endpoint: func(i int) string { return fmt.Sprintf("IPKEEPER_ETCD_ENDPOINTS item %d", i+1) }}

// rawDatastore is a datastore object.
type rawDatastore struct {
	Type           json.RawMessage `json:"type"`
	Path           json.RawMessage `json:"path"`
	Endpoints      json.RawMessage `json:"endpoints"`
	CAFile         json.RawMessage `json:"caFile"`
	CertFile       json.RawMessage `json:"certFile"`
	KeyFile        json.RawMessage `json:"keyFile"`
	Prefix         json.RawMessage `json:"prefix"`
	DialTimeout    json.RawMessage `json:"dialTimeout"`
	RequestTimeout json.RawMessage `json:"requestTimeout"`
	Kubeconfig     json.RawMessage `json:"kubeconfig"`
}

// ParseDatastore parses and validates a datastore object as found in a CNI
// config or given to the admin tools; absent or null means the defaults
// (a local store at DefaultLocalPath). Errors wrap ErrInvalid.
func ParseDatastore(raw json.RawMessage) (Datastore, error) {
	return parseDatastore(raw, "datastore")
}

func parseDatastore(raw json.RawMessage, key string) (Datastore, error) {
	keys := jsonDatastoreKeys(key)
	var d Datastore
	if !present(raw) {
		return d, d.finish(keys)
	}
	var rd rawDatastore
	if err := object(raw, key, &rd); err != nil {
		return Datastore{}, err
	}
	var err error
	for _, f := range []struct {
		raw json.RawMessage
		key string
		dst *string
	}{{rd.Type, keys.typ, &d.Type}, {rd.Path, keys.path, &d.Path}, {rd.CAFile, keys.ca, &d.CAFile},
		{rd.CertFile, keys.cert, &d.CertFile}, {rd.KeyFile, keys.key, &d.KeyFile}, {rd.Prefix, keys.prefix, &d.Prefix},
		{rd.Kubeconfig, keys.kubeconfig, &d.Kubeconfig}} {
		if present(f.raw) {
			if *f.dst, err = str(f.raw, f.key); err != nil {
				return Datastore{}, err
			}
		}
	}
	if present(rd.Endpoints) {
		if kindOf(rd.Endpoints) == "a string" {
			s, _ := str(rd.Endpoints, keys.endpoints)
			d.Endpoints = splitList(s)
		} else if d.Endpoints, err = strList(rd.Endpoints, keys.endpoints); err != nil {
			return Datastore{}, err
		}
	}
	for _, f := range []struct {
		raw json.RawMessage
		key string
		dst *time.Duration
	}{{rd.DialTimeout, keys.dial, &d.DialTimeout}, {rd.RequestTimeout, keys.request, &d.RequestTimeout}} {
		if present(f.raw) {
			if *f.dst, err = jsonDuration(f.raw, f.key); err != nil {
				return Datastore{}, err
			}
		}
	}
	if present(rd.Kubeconfig) && d.Kubeconfig == "" {
		return Datastore{}, invalid(keys.kubeconfig, "is empty: give an absolute path, or leave the key out for the in-cluster configuration")
	}
	if present(rd.Path) && d.Path == "" {
		return Datastore{}, invalid(keys.path, "is empty: give an absolute directory, or leave the key out for the default %s", DefaultLocalPath)
	}
	if err := d.finish(keys); err != nil {
		return Datastore{}, err
	}
	return d, nil
}

// DatastoreFromEnv builds a datastore from IPKEEPER_DATASTORE,
// IPKEEPER_LOCAL_PATH (made absolute), IPKEEPER_ETCD_ENDPOINTS (comma list),
// IPKEEPER_ETCD_CA, IPKEEPER_ETCD_CERT, IPKEEPER_ETCD_KEY,
// IPKEEPER_ETCD_PREFIX, IPKEEPER_ETCD_DIAL_TIMEOUT,
// IPKEEPER_ETCD_REQUEST_TIMEOUT (durations or integer seconds),
// IPKEEPER_DATASTORE_KUBECONFIG and IPKEEPER_DATASTORE_PREFIX (the
// kubernetes datastore's kubeconfig and partition). A nil getenv
// means os.Getenv. Unset variables take the defaults; errors wrap ErrInvalid.
func DatastoreFromEnv(getenv func(string) string) (Datastore, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	k := envDatastoreKeys
	d := Datastore{Type: getenv(k.typ), Path: getenv(k.path), Endpoints: splitList(getenv(k.endpoints)),
		CAFile: getenv(k.ca), CertFile: getenv(k.cert), KeyFile: getenv(k.key), Prefix: getenv(k.prefix),
		Kubeconfig: getenv(k.kubeconfig)}
	if d.Type == DatastoreKubernetes {
		if d.Prefix != "" {
			return Datastore{}, invalid(k.prefix, "is set for a %q datastore; name its partition with %s", DatastoreKubernetes, k.kubePrefix)
		}
		d.Prefix = getenv(k.kubePrefix)
	} else if getenv(k.kubePrefix) != "" {
		return Datastore{}, invalid(k.kubePrefix, "is set but %s is %s; it names the partition of a %q datastore", k.typ, quote(d.Type), DatastoreKubernetes)
	}
	if d.Path != "" && !filepath.IsAbs(d.Path) {
		abs, err := filepath.Abs(d.Path)
		if err != nil {
			return Datastore{}, invalid(k.path, "%s cannot be made absolute: %v", quote(d.Path), err)
		}
		d.Path = abs
	}
	var err error
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{k.dial, &d.DialTimeout}, {k.request, &d.RequestTimeout}} {
		if v := getenv(f.key); v != "" {
			if *f.dst, err = textDuration(v, f.key); err != nil {
				return Datastore{}, err
			}
		}
	}
	if err := d.finish(k); err != nil {
		return Datastore{}, err
	}
	return d, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// finish fills in defaults and validates d.
func (d *Datastore) finish(k datastoreKeys) error {
	if d.Type == "" {
		d.Type = DatastoreLocal
	}
	if d.DialTimeout == 0 {
		d.DialTimeout = DefaultDialTimeout
	}
	if d.RequestTimeout == 0 {
		d.RequestTimeout = DefaultRequestTimeout
	}
	for _, f := range []struct{ key, val string }{{k.path, d.Path}, {k.ca, d.CAFile}, {k.cert, d.CertFile},
		{k.key, d.KeyFile}, {k.prefix, d.Prefix}, {k.kubeconfig, d.Kubeconfig}} {
		if strings.ContainsRune(f.val, 0) {
			return invalid(f.key, "%s contains a NUL byte", quote(f.val))
		}
		if len(f.val) > MaxPathLength {
			return invalid(f.key, "is %d bytes long, more than the limit of %d", len(f.val), MaxPathLength)
		}
	}
	if d.Type != DatastoreKubernetes && d.Kubeconfig != "" {
		return invalid(k.kubeconfig, "is set but %s is %s; set it to %q to keep the state in the Kubernetes API", k.typ, quote(d.Type), DatastoreKubernetes)
	}
	switch d.Type {
	case DatastoreLocal:
		// A forgotten "type": "etcd" would silently give every node its own
		// store, and so duplicate addresses across nodes: refuse.
		for _, f := range []struct {
			key string
			set bool
		}{{k.endpoints, len(d.Endpoints) != 0}, {k.ca, d.CAFile != ""}, {k.cert, d.CertFile != ""}, {k.key, d.KeyFile != ""}} {
			if f.set {
				return invalid(f.key, "is set but %s is %q; set it to %q to use etcd", k.typ, DatastoreLocal, DatastoreEtcd)
			}
		}
		if d.Path == "" {
			d.Path = DefaultLocalPath
		}
		if !filepath.IsAbs(d.Path) {
			return invalid(k.path, "%s is not an absolute path", quote(d.Path))
		}
		d.Path = filepath.Clean(d.Path)
	case DatastoreEtcd:
		if len(d.Endpoints) == 0 {
			return invalid(k.endpoints, "is missing: etcd needs at least one endpoint")
		}
		for i, ep := range d.Endpoints {
			if err := checkEndpoint(ep, k.endpoint(i)); err != nil {
				return err
			}
		}
		if (d.CertFile == "") != (d.KeyFile == "") {
			if d.CertFile == "" {
				return invalid(k.cert, "is missing: %s needs a client certificate", k.key)
			}
			return invalid(k.key, "is missing: %s needs a private key", k.cert)
		}
		if d.Prefix == "" {
			d.Prefix = DefaultEtcdPrefix
		}
		if !strings.HasPrefix(d.Prefix, "/") {
			return invalid(k.prefix, "%s must start with \"/\"", quote(d.Prefix))
		}
		if d.Prefix = strings.TrimRight(d.Prefix, "/"); d.Prefix == "" {
			return invalid(k.prefix, "must not be \"/\": ipkeeper needs a prefix of its own")
		}
	case DatastoreKubernetes:
		return d.finishKubernetes(k)
	default:
		return invalid(k.typ, "%s is not supported (want %s, %s or %s)", quote(d.Type), DatastoreLocal, DatastoreEtcd, DatastoreKubernetes)
	}
	return nil
}

// checkEndpoint validates one etcd endpoint without repeating credentials.
func checkEndpoint(ep, key string) error {
	if !strings.Contains(ep, "://") {
		if strings.Contains(ep, "@") {
			return invalid(key, "must not carry credentials")
		}
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return invalid(key, "%s is neither host:port nor a URL", quote(ep))
		}
		return nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return invalid(key, "is not a valid URL")
	}
	if u.User != nil {
		return invalid(key, "must not carry credentials in the URL")
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return invalid(key, "%s has no host", quote(ep))
		}
	case "unix", "unixs":
		if u.Host == "" && u.Path == "" {
			return invalid(key, "%s has no socket path", quote(ep))
		}
	default:
		return invalid(key, "scheme %s is not supported (want http, https, unix or unixs)", quote(u.Scheme))
	}
	return nil
}

// jsonDuration decodes a duration: a Go duration string or integer seconds.
func jsonDuration(raw json.RawMessage, key string) (time.Duration, error) {
	switch kindOf(raw) {
	case "a string":
		s, err := str(raw, key)
		if err != nil {
			return 0, err
		}
		return textDuration(s, key)
	case "a number":
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, wrongType(key, "a duration", raw)
		}
		return textDuration(n.String(), key)
	default:
		return 0, wrongType(key, "a duration such as \"5s\" or integer seconds", raw)
	}
}

// textDuration parses "5s"-style durations or integer seconds; the result is positive.
func textDuration(s, key string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < -math.MaxInt64/int64(time.Second) {
			return 0, invalid(key, "%s seconds is out of range", quote(s))
		}
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, invalid(key, "%s is not a duration (want e.g. \"5s\" or integer seconds)", quote(s))
	}
	if d <= 0 {
		return 0, invalid(key, "%s must be positive", quote(s))
	}
	return d, nil
}

// ipamDatastore reads ipam.datastore: an object, or whereabouts' legacy
// string "etcd" (with etcd_host). etcd_host without a datastore key also
// selects etcd; no datastore at all means the local default. Whereabouts'
// "kubernetes" gives a kubernetes datastore whose kubeconfig
// whereaboutsDatastore fills in.
func ipamDatastore(ri *rawIPAM) (Datastore, error) {
	legacy := ""
	if kindOf(ri.Datastore) == "a string" {
		legacy, _ = str(ri.Datastore, "ipam.datastore")
		switch legacy {
		case DatastoreKubernetes:
			if present(ri.EtcdHost) {
				return Datastore{}, invalid("ipam.etcd_host", "is set but ipam.datastore is %q; remove it, or set ipam.datastore to \"etcd\"", legacy)
			}
			return Datastore{Type: DatastoreKubernetes, DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}, nil
		case "etcd":
		default:
			return Datastore{}, invalid("ipam.datastore", "%s is not supported (want an object, or whereabouts' \"kubernetes\" or \"etcd\")", quote(legacy))
		}
	} else if present(ri.Datastore) {
		if present(ri.EtcdHost) {
			return Datastore{}, invalid("ipam.etcd_host", "cannot be combined with an ipam.datastore object; use ipam.datastore.endpoints")
		}
		return parseDatastore(ri.Datastore, "ipam.datastore")
	}
	if !present(ri.EtcdHost) {
		if legacy == "etcd" {
			return Datastore{}, invalid("ipam.etcd_host", "is missing: ipam.datastore \"etcd\" needs it")
		}
		return parseDatastore(nil, "ipam.datastore")
	}
	keys := datastoreKeys{typ: "ipam.datastore", path: "ipam.datastore", endpoints: "ipam.etcd_host",
		ca: "ipam.etcd_ca_cert_file", cert: "ipam.etcd_cert_file", key: "ipam.etcd_key_file",
		prefix: "ipam.datastore", dial: "ipam.datastore", request: "ipam.datastore",
		kubeconfig: "ipam.kubernetes.kubeconfig", kubePrefix: "ipam.datastore",
		endpoint: func(i int) string { return fmt.Sprintf("ipam.etcd_host item %d", i+1) }}
	d := Datastore{Type: DatastoreEtcd}
	host, err := str(ri.EtcdHost, keys.endpoints)
	if err != nil {
		return Datastore{}, err
	}
	for _, f := range []struct {
		raw json.RawMessage
		key string
		dst *string
	}{{ri.EtcdCACertFile, keys.ca, &d.CAFile}, {ri.EtcdCertFile, keys.cert, &d.CertFile}, {ri.EtcdKeyFile, keys.key, &d.KeyFile}} {
		if present(f.raw) {
			if *f.dst, err = str(f.raw, f.key); err != nil {
				return Datastore{}, err
			}
		}
	}
	scheme := "http://"
	if d.CAFile != "" || d.CertFile != "" || d.KeyFile != "" {
		scheme = "https://"
	}
	for _, ep := range splitList(host) {
		if !strings.Contains(ep, "://") {
			ep = scheme + ep
		}
		d.Endpoints = append(d.Endpoints, ep)
	}
	if err := d.finish(keys); err != nil {
		return Datastore{}, err
	}
	return d, nil
}

// whereaboutsDatastore completes the datastore of a whereabouts config
// that names none (or names "kubernetes"): whereabouts' default is the
// Kubernetes API with the kubeconfig ipam.kubernetes.kubeconfig names,
// and so is ipkeeper's for that syntax. Falling back to a node-local
// store would make every node of a cluster hand out the same addresses,
// so a whereabouts config without that kubeconfig is refused. Host-local
// and native configs keep the local default, which is what host-local
// users have.
func whereaboutsDatastore(ri *rawIPAM, out *IPAM) error {
	legacy := kindOf(ri.Datastore) == "a string"
	implied := out.Syntax == SyntaxWhereabouts && !present(ri.Datastore) && !present(ri.EtcdHost)
	if !legacy && !implied || out.Datastore.Type != DatastoreKubernetes && !implied {
		return nil
	}
	if out.Kubeconfig == "" {
		what := "is missing, and whereabouts' default datastore (the Kubernetes API)"
		if legacy {
			what = "is missing: ipam.datastore \"kubernetes\" (the Kubernetes API)"
		}
		return invalid("ipam.kubernetes.kubeconfig", "%s needs the kubeconfig it names, as in whereabouts "+
			"(\"kubernetes\": {\"kubeconfig\": \"/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig\"}); "+
			`or give ipam.datastore as an object: {"type": "local"} to keep the state on this machine, `+
			`{"type": "etcd", "endpoints": ["https://..."]} to share it through etcd`, what)
	}
	out.Datastore = Datastore{Type: DatastoreKubernetes, Kubeconfig: out.Kubeconfig,
		DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}
	return nil
}
