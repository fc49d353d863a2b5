package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseDatastore covers the datastore object on its own, as the admin
// tools pass it.
func TestParseDatastore(t *testing.T) {
	ok := []struct {
		name string
		in   string
		want Datastore
	}{
		{"absent", ``, defaultDatastore},
		{"null", `null`, defaultDatastore},
		{"empty object", `{}`, defaultDatastore},
		{"local with path cleaned", `{"type": "local", "path": "/srv/ipk/../ipkeeper/"}`,
			Datastore{Type: DatastoreLocal, Path: "/srv/ipkeeper", DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}},
		{"etcd IPv4 endpoint", `{"type": "etcd", "endpoints": ["https://127.0.0.1:2379"]}`, etcdDatastore("https://127.0.0.1:2379")},
		{"etcd IPv6 endpoint", `{"type": "etcd", "endpoints": ["https://[::1]:2379"]}`, etcdDatastore("https://[::1]:2379")},
		{"etcd endpoints as comma string", `{"type": "etcd", "endpoints": "10.0.0.1:2379, [fd00::1]:2379"}`,
			etcdDatastore("10.0.0.1:2379", "[fd00::1]:2379")},
		{"etcd unix socket", `{"type": "etcd", "endpoints": ["unix:///run/etcd.sock"]}`, etcdDatastore("unix:///run/etcd.sock")},
		{"etcd local path ignored", `{"type": "etcd", "endpoints": ["h:1"], "path": "relative"}`,
			Datastore{Type: DatastoreEtcd, Path: "relative", Endpoints: []string{"h:1"}, Prefix: DefaultEtcdPrefix,
				DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}},
		{"etcd TLS, prefix, timeouts", `{"type": "etcd", "endpoints": ["https://e:2379"], "caFile": "/ca", "certFile": "/c", "keyFile": "/k",
			"prefix": "/a/b//", "dialTimeout": 2, "requestTimeout": "1m30s"}`,
			Datastore{Type: DatastoreEtcd, Endpoints: []string{"https://e:2379"}, CAFile: "/ca", CertFile: "/c", KeyFile: "/k",
				Prefix: "/a/b", DialTimeout: 2 * time.Second, RequestTimeout: 90 * time.Second}},
		{"kubernetes in-cluster", `{"type": "kubernetes"}`,
			Datastore{Type: DatastoreKubernetes, DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}},
		{"kubernetes kubeconfig, partition, timeout", `{"type": "kubernetes", "kubeconfig": "/etc/cni/net.d/../net.d/ipkeeper-kubeconfig",
			"prefix": "team-a", "requestTimeout": "3s"}`,
			Datastore{Type: DatastoreKubernetes, Kubeconfig: "/etc/cni/net.d/ipkeeper-kubeconfig", Prefix: "team-a",
				DialTimeout: DefaultDialTimeout, RequestTimeout: 3 * time.Second}},
		{"kubernetes local path ignored", `{"type": "kubernetes", "path": "relative"}`,
			Datastore{Type: DatastoreKubernetes, Path: "relative", DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}},
		{"etcd CA only", `{"type": "etcd", "endpoints": ["https://e:2379"], "caFile": "/ca"}`, func() Datastore {
			d := etcdDatastore("https://e:2379")
			d.CAFile = "/ca"
			return d
		}()},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDatastore(json.RawMessage(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	bad := []struct {
		name, in, key, fragment string
	}{
		{"not an object", `"etcd"`, "datastore", "must be an object, not a string"},
		{"type unknown", `{"type": "foo"}`, "datastore.type", `datastore.type "foo" is not supported (want local, etcd or kubernetes)`},
		{"kubernetes relative kubeconfig", `{"type": "kubernetes", "kubeconfig": "kc"}`, "datastore.kubeconfig", `"kc" is not an absolute path`},
		{"kubernetes empty kubeconfig", `{"type": "kubernetes", "kubeconfig": ""}`, "datastore.kubeconfig", "is empty"},
		{"kubernetes kubeconfig not a string", `{"type": "kubernetes", "kubeconfig": 1}`, "datastore.kubeconfig", "must be a string"},
		{"kubernetes kubeconfig with NUL", `{"type": "kubernetes", "kubeconfig": "/k\u0000"}`, "datastore.kubeconfig", "contains a NUL byte"},
		{"kubernetes partition not a DNS label", `{"type": "kubernetes", "prefix": "/ipkeeper"}`, "datastore.prefix", "is not a DNS label"},
		{"kubernetes partition too long", `{"type": "kubernetes", "prefix": "` + strings.Repeat("a", 64) + `"}`, "datastore.prefix", "is not a DNS label"},
		{"kubernetes with endpoints", `{"type": "kubernetes", "endpoints": ["https://e:2379"]}`, "datastore.endpoints", `"kubernetes"`},
		{"kubernetes with caFile", `{"type": "kubernetes", "caFile": "/ca"}`, "datastore.caFile", "keeps the state in the Kubernetes API"},
		{"kubeconfig without kubernetes", `{"type": "etcd", "endpoints": ["h:1"], "kubeconfig": "/k"}`, "datastore.kubeconfig", `set it to "kubernetes"`},
		{"kubeconfig without type", `{"kubeconfig": "/k"}`, "datastore.kubeconfig", `datastore.type is "local"`},
		{"type not a string", `{"type": 1}`, "datastore.type", "must be a string"},
		{"local relative path", `{"path": "var/lib"}`, "datastore.path", `"var/lib" is not an absolute path`},
		{"local empty path", `{"type": "local", "path": ""}`, "datastore.path", "is empty: give an absolute directory"},
		{"local path with NUL", `{"type": "local", "path": "/var/lib/x\u0000y"}`, "datastore.path", "contains a NUL byte"},
		{"local path too long", `{"type": "local", "path": "/` + strings.Repeat("a", 4096) + `"}`, "datastore.path", "more than the limit of 4095"},
		{"etcd caFile with NUL", `{"type": "etcd", "endpoints": ["h:1"], "caFile": "/ca\u0000"}`, "datastore.caFile", "contains a NUL byte"},
		{"etcd prefix with NUL", `{"type": "etcd", "endpoints": ["h:1"], "prefix": "/ipk\u0000"}`, "datastore.prefix", "contains a NUL byte"},
		{"local with endpoints (forgot type)", `{"endpoints": ["https://e:2379"]}`, "datastore.endpoints", `set it to "etcd"`},
		{"local with certFile", `{"type": "local", "certFile": "/c"}`, "datastore.certFile", `datastore.type is "local"`},
		{"etcd without endpoints", `{"type": "etcd"}`, "datastore.endpoints", "is missing"},
		{"etcd empty endpoint list", `{"type": "etcd", "endpoints": []}`, "datastore.endpoints", "is missing"},
		{"etcd endpoint not a string", `{"type": "etcd", "endpoints": [2379]}`, "datastore.endpoints[0]", "must be a string"},
		{"etcd endpoint without port", `{"type": "etcd", "endpoints": ["h:1", "etcd-a"]}`, "datastore.endpoints[1]", `"etcd-a" is neither host:port nor a URL`},
		{"etcd endpoint bad IPv6", `{"type": "etcd", "endpoints": ["fd00::1:2379"]}`, "datastore.endpoints[0]", "neither host:port nor a URL"},
		{"etcd endpoint scheme", `{"type": "etcd", "endpoints": ["grpc://e:2379"]}`, "datastore.endpoints[0]", `scheme "grpc" is not supported`},
		{"etcd endpoint no host", `{"type": "etcd", "endpoints": ["https://"]}`, "datastore.endpoints[0]", "has no host"},
		{"etcd cert without key", `{"type": "etcd", "endpoints": ["h:1"], "certFile": "/c"}`, "datastore.keyFile", "is missing"},
		{"etcd key without cert", `{"type": "etcd", "endpoints": ["h:1"], "keyFile": "/k"}`, "datastore.certFile", "is missing"},
		{"etcd prefix relative", `{"type": "etcd", "endpoints": ["h:1"], "prefix": "ipk"}`, "datastore.prefix", `"ipk" must start with "/"`},
		{"etcd prefix root", `{"type": "etcd", "endpoints": ["h:1"], "prefix": "/"}`, "datastore.prefix", `must not be "/"`},
		{"timeout unparsable", `{"type": "etcd", "endpoints": ["h:1"], "dialTimeout": "soon"}`, "datastore.dialTimeout", `"soon" is not a duration`},
		{"timeout negative", `{"type": "etcd", "endpoints": ["h:1"], "requestTimeout": -1}`, "datastore.requestTimeout", "must be positive"},
		{"timeout zero", `{"dialTimeout": "0s"}`, "datastore.dialTimeout", "must be positive"},
		{"timeout fractional seconds", `{"dialTimeout": 1.5}`, "datastore.dialTimeout", `"1.5" is not a duration`},
		{"timeout huge", `{"dialTimeout": 99999999999999999}`, "datastore.dialTimeout", "out of range"},
		{"timeout boolean", `{"requestTimeout": true}`, "datastore.requestTimeout", "must be a duration"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseDatastore(json.RawMessage(tt.in))
			checkErr(t, err, tt.key, tt.fragment)
		})
	}
}

// TestDatastoreFromEnv covers the IPKEEPER_* variables.
func TestDatastoreFromEnv(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ok := []struct {
		name string
		env  map[string]string
		want Datastore
	}{
		{"nothing set", nil, defaultDatastore},
		{"local path absolute", map[string]string{"IPKEEPER_DATASTORE": "local", "IPKEEPER_LOCAL_PATH": "/tmp/ipk"},
			Datastore{Type: DatastoreLocal, Path: "/tmp/ipk", DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}},
		{"local path made absolute", map[string]string{"IPKEEPER_LOCAL_PATH": "data"},
			Datastore{Type: DatastoreLocal, Path: filepath.Join(wd, "data"), DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}},
		{"etcd IPv4 and IPv6 endpoints with TLS", map[string]string{"IPKEEPER_DATASTORE": "etcd",
			"IPKEEPER_ETCD_ENDPOINTS": "https://10.0.0.1:2379,https://[fd00::1]:2379,", "IPKEEPER_ETCD_CA": "/ca",
			"IPKEEPER_ETCD_CERT": "/c", "IPKEEPER_ETCD_KEY": "/k", "IPKEEPER_ETCD_PREFIX": "/x",
			"IPKEEPER_ETCD_DIAL_TIMEOUT": "3", "IPKEEPER_ETCD_REQUEST_TIMEOUT": "250ms", "IPKEEPER_LOCAL_PATH": "/ignored"},
			Datastore{Type: DatastoreEtcd, Path: "/ignored", Endpoints: []string{"https://10.0.0.1:2379", "https://[fd00::1]:2379"},
				CAFile: "/ca", CertFile: "/c", KeyFile: "/k", Prefix: "/x", DialTimeout: 3 * time.Second, RequestTimeout: 250 * time.Millisecond}},
		{"kubernetes with kubeconfig and partition", map[string]string{"IPKEEPER_DATASTORE": "kubernetes",
			"IPKEEPER_DATASTORE_KUBECONFIG": "/etc/ipkeeper/kubeconfig", "IPKEEPER_DATASTORE_PREFIX": "team-b", "IPKEEPER_ETCD_REQUEST_TIMEOUT": "2s"},
			Datastore{Type: DatastoreKubernetes, Kubeconfig: "/etc/ipkeeper/kubeconfig", Prefix: "team-b",
				DialTimeout: DefaultDialTimeout, RequestTimeout: 2 * time.Second}},
		{"kubernetes in-cluster", map[string]string{"IPKEEPER_DATASTORE": "kubernetes"},
			Datastore{Type: DatastoreKubernetes, DialTimeout: DefaultDialTimeout, RequestTimeout: DefaultRequestTimeout}},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DatastoreFromEnv(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	bad := []struct {
		name string
		env  map[string]string
		key  string
		frag string
	}{
		{"unknown type", map[string]string{"IPKEEPER_DATASTORE": "consul"}, "IPKEEPER_DATASTORE", `"consul" is not supported (want local, etcd or kubernetes)`},
		{"kubernetes relative kubeconfig", map[string]string{"IPKEEPER_DATASTORE": "kubernetes", "IPKEEPER_DATASTORE_KUBECONFIG": "kc"},
			"IPKEEPER_DATASTORE_KUBECONFIG", "is not an absolute path"},
		{"kubernetes partition", map[string]string{"IPKEEPER_DATASTORE": "kubernetes", "IPKEEPER_DATASTORE_PREFIX": "A_B"},
			"IPKEEPER_DATASTORE_PREFIX", "is not a DNS label"},
		{"kubernetes with etcd prefix", map[string]string{"IPKEEPER_DATASTORE": "kubernetes", "IPKEEPER_ETCD_PREFIX": "/x"},
			"IPKEEPER_ETCD_PREFIX", "IPKEEPER_DATASTORE_PREFIX"},
		{"partition without kubernetes", map[string]string{"IPKEEPER_DATASTORE": "etcd", "IPKEEPER_ETCD_ENDPOINTS": "h:1",
			"IPKEEPER_DATASTORE_PREFIX": "a"}, "IPKEEPER_DATASTORE_PREFIX", `names the partition of a "kubernetes" datastore`},
		{"kubeconfig without kubernetes", map[string]string{"IPKEEPER_DATASTORE_KUBECONFIG": "/k"},
			"IPKEEPER_DATASTORE_KUBECONFIG", "IPKEEPER_DATASTORE"},
		{"etcd without endpoints", map[string]string{"IPKEEPER_DATASTORE": "etcd"}, "IPKEEPER_ETCD_ENDPOINTS", "is missing"},
		{"endpoints without type", map[string]string{"IPKEEPER_ETCD_ENDPOINTS": "h:1"}, "IPKEEPER_ETCD_ENDPOINTS", "IPKEEPER_DATASTORE"},
		{"bad second endpoint", map[string]string{"IPKEEPER_DATASTORE": "etcd", "IPKEEPER_ETCD_ENDPOINTS": "h:1,nope"},
			"IPKEEPER_ETCD_ENDPOINTS item 2", `"nope"`},
		{"cert without key", map[string]string{"IPKEEPER_DATASTORE": "etcd", "IPKEEPER_ETCD_ENDPOINTS": "h:1", "IPKEEPER_ETCD_CERT": "/c"},
			"IPKEEPER_ETCD_KEY", "is missing"},
		{"bad timeout", map[string]string{"IPKEEPER_ETCD_DIAL_TIMEOUT": "5 parsecs"}, "IPKEEPER_ETCD_DIAL_TIMEOUT", "is not a duration"},
		{"credentials in endpoint", map[string]string{"IPKEEPER_DATASTORE": "etcd", "IPKEEPER_ETCD_ENDPOINTS": "https://root:hunter2@e:2379"},
			"IPKEEPER_ETCD_ENDPOINTS item 1", "credentials"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DatastoreFromEnv(func(k string) string { return tt.env[k] })
			checkErr(t, err, tt.key, tt.frag)
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q repeats a password", err)
			}
		})
	}
	t.Run("nil getenv reads the process environment", func(t *testing.T) {
		t.Setenv("IPKEEPER_DATASTORE", "etcd")
		t.Setenv("IPKEEPER_ETCD_ENDPOINTS", "http://127.0.0.1:2379")
		got, err := DatastoreFromEnv(nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := etcdDatastore("http://127.0.0.1:2379"); !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
}
