package kube

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
)

// maxCredentialFile bounds the kubeconfig and each file it names.
const maxCredentialFile = 1 << 20

// inClusterDir is where the kubelet mounts a pod's ServiceAccount token
// and the cluster's CA (a variable for tests).
var inClusterDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// tokenPeriod is how long a token read from a file is used before the
// file is read again (client-go's own period for token files: the kubelet
// rotates a projected token well before it expires).
const tokenPeriod = time.Minute

// RESTConfig returns the client configuration of the kubeconfig at path,
// or the in-cluster configuration (the pod's ServiceAccount) when path is
// "". Whoever can write these files chooses the API server and the
// credentials, so every file is read through filetrust (owned by root or
// the caller, not writable by group or others, reached only through
// directories and links of root's or the caller's): the kubeconfig, the
// certificate-authority, client-certificate, client-key and tokenFile of
// its current context (relative to the kubeconfig's directory, as with
// kubectl; a *-data field wins over its file, which is then not read), and
// the in-cluster token and ca.crt (the kubelet's root-owned ..data links
// pass). A token file is read again, through the same check, every
// tokenPeriod and after a 401, so a rotated token is used; a re-read that
// fails keeps the token last read. Nothing is sent.
//
// Errors wrap ErrBadConfig and name the file; an unsafe file also wraps
// filetrust.ErrUnsafe; outside a pod, "" gives rest.ErrNotInCluster
// (wrapped too).
func RESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		rc, err := inCluster()
		if err != nil {
			return nil, fmt.Errorf("%w: in-cluster configuration: %w", ErrBadConfig, err)
		}
		return rc, nil
	}
	data, err := filetrust.ReadFile("kubeconfig", path, maxCredentialFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	rc, err := kubeconfigRESTConfig(path, data)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeconfig %s: %w", ErrBadConfig, path, err)
	}
	return rc, nil
}

// kubeconfigRESTConfig builds the configuration of a kubeconfig's current
// context, after reading each file it names through filetrust and putting
// the content in its place, so that client-go reads no file itself.
func kubeconfigRESTConfig(path string, data []byte) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	for _, c := range kc.Clusters {
		c.LocationOfOrigin = abs
	}
	for _, a := range kc.AuthInfos {
		a.LocationOfOrigin = abs
	}
	if err := clientcmd.ResolveLocalPaths(kc); err != nil {
		return nil, err
	}
	tokenFile := ""
	if cx := kc.Contexts[kc.CurrentContext]; cx != nil {
		if c := kc.Clusters[cx.Cluster]; c != nil {
			if err := inline("certificate-authority", &c.CertificateAuthority, &c.CertificateAuthorityData); err != nil {
				return nil, err
			}
		}
		if a := kc.AuthInfos[cx.AuthInfo]; a != nil {
			if err := inline("client-certificate", &a.ClientCertificate, &a.ClientCertificateData); err != nil {
				return nil, err
			}
			if err := inline("client-key", &a.ClientKey, &a.ClientKeyData); err != nil {
				return nil, err
			}
			if tokenFile = a.TokenFile; tokenFile != "" {
				if _, err := (fileToken{tokenFile}).Token(); err != nil {
					return nil, err
				}
				// client-go would read the file itself; the token
				// source below reads it instead.
				a.TokenFile, a.Token = "", ""
			}
		}
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*kc, kc.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, err
	}
	if tokenFile != "" {
		rc.WrapTransport = tokenTransport(tokenFile)
	}
	return rc, nil
}

// inline reads the file *file names through filetrust into *data, unless
// *data is set already, and clears *file.
func inline(what string, file *string, data *[]byte) error {
	if *file == "" {
		return nil
	}
	if len(*data) == 0 {
		b, err := filetrust.ReadFile(what, *file, maxCredentialFile)
		if err != nil {
			return err
		}
		*data = b
	}
	*file = ""
	return nil
}

// inCluster is rest.InClusterConfig with the token and the CA read through
// filetrust. A missing ca.crt leaves the system's roots, as client-go does.
func inCluster() (*rest.Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, rest.ErrNotInCluster
	}
	token := filepath.Join(inClusterDir, "token")
	if _, err := (fileToken{token}).Token(); err != nil {
		return nil, err
	}
	rc := &rest.Config{Host: "https://" + net.JoinHostPort(host, port), WrapTransport: tokenTransport(token)}
	ca, err := filetrust.ReadFile("ServiceAccount CA", filepath.Join(inClusterDir, "ca.crt"), maxCredentialFile)
	switch {
	case err == nil:
		rc.CAData = ca
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	return rc, nil
}

// tokenTransport sets each request's bearer token from the file at path
// (unless the request has an Authorization header already), read again
// every tokenPeriod and after a 401.
func tokenTransport(path string) transport.WrapperFunc {
	return transport.ResettableTokenSourceWrapTransport(transport.NewCachedTokenSource(fileToken{path}))
}

// fileToken reads a bearer token from a file through filetrust.
type fileToken struct{ path string }

func (f fileToken) Token() (*oauth2.Token, error) {
	b, err := filetrust.ReadFile("token file", f.path, maxCredentialFile)
	if err != nil {
		return nil, err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("token file %s is empty", f.path)
	}
	return &oauth2.Token{AccessToken: tok, TokenType: "Bearer", Expiry: time.Now().Add(tokenPeriod)}, nil
}
