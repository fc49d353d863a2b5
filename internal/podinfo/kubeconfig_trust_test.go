//go:build unix

package podinfo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
	"github.com/ipkeeper/ipkeeper/internal/filetrust/filetrusttest"
)

// trustTargets are the kubeconfig and the files it names, by key.
var trustTargets = []string{"kubeconfig", "certificate-authority", "client-certificate", "client-key", "tokenFile"}

// placeKubeconfig writes a kubeconfig naming a CA, a client certificate,
// a key and a token file, each in base (mode 0600) but target, which
// place puts where it wants; it returns the kubeconfig's path and the
// path a refusal must name.
func placeKubeconfig(t *testing.T, base, target string, place func(testing.TB, string, []byte) (string, string)) (kc, names string) {
	t.Helper()
	cert, key := testCert(t)
	content := map[string][]byte{"certificate-authority": cert, "client-certificate": cert, "client-key": key, "tokenFile": []byte("tok\n")}
	sub := filepath.Join(base, "placed")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for k, data := range content {
		if k == target {
			paths[k], names = place(t, sub, data)
		} else {
			paths[k] = write(t, base, k, data)
		}
	}
	yaml := kubeconfigYAML("https://127.0.0.1:6443", "    certificate-authority: "+paths["certificate-authority"],
		"    client-certificate: "+paths["client-certificate"]+"\n    client-key: "+paths["client-key"]+"\n    tokenFile: "+paths["tokenFile"])
	if target == "kubeconfig" {
		return place(t, sub, []byte(yaml))
	}
	return write(t, base, "kubeconfig", []byte(yaml)), names
}

// A kubeconfig, or a file it names, that another user could have written
// is refused with ErrKubeconfig and filetrust.ErrUnsafe, naming the
// kubeconfig, the file's key and the path that breaks the rule.
func TestLoadKubeconfigRefusesUnsafe(t *testing.T) {
	for _, target := range trustTargets {
		t.Run(target, func(t *testing.T) {
			filetrusttest.Run(t, filetrusttest.Unsafe(), func(t *testing.T, c filetrusttest.Case, base string) {
				kc, names := placeKubeconfig(t, base, target, c.Place)
				creds, err := LoadKubeconfig(kc)
				if !errors.Is(err, ErrKubeconfig) || !errors.Is(err, filetrust.ErrUnsafe) ||
					!strings.Contains(err.Error(), names) || !strings.Contains(err.Error(), kc) || !strings.Contains(err.Error(), target) {
					t.Fatalf("LoadKubeconfig = %+v, %v; want ErrKubeconfig and filetrust.ErrUnsafe naming %s, %s and %s", creds, err, kc, target, names)
				}
				if strings.Contains(err.Error(), "BEGIN") || strings.Contains(err.Error(), "tok\n") {
					t.Fatalf("message shows a credential: %v", err)
				}
			})
		})
	}
}

// Each file in each safe placement (root's link, the kubelet's ..data
// layout, a sticky directory) is read.
func TestLoadKubeconfigAcceptsSafe(t *testing.T) {
	for _, target := range trustTargets {
		t.Run(target, func(t *testing.T) {
			filetrusttest.Run(t, filetrusttest.Safe(), func(t *testing.T, c filetrusttest.Case, base string) {
				kc, _ := placeKubeconfig(t, base, target, c.Place)
				creds, err := LoadKubeconfig(kc)
				if err != nil {
					t.Fatal(err)
				}
				if creds.Token != "tok" || creds.TLS.RootCAs == nil || len(creds.TLS.Certificates) != 1 {
					t.Fatalf("credentials %+v", creds)
				}
			})
		})
	}
}
