package podinfo

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
)

// maxFile bounds the files a kubeconfig names (and the kubeconfig itself).
const maxFile = 1 << 20

// Credentials is what a kubeconfig says about reaching the API server.
type Credentials struct {
	// Server is the API server's base URL (https://host:port[/path]).
	Server *url.URL
	// TLS holds the CA pool, the client certificate and the server name.
	TLS *tls.Config
	// Token is a bearer token ("" for none).
	Token string
	// Username and Password are HTTP basic credentials ("" for none).
	Username, Password string
}

// rawKubeconfig is the part of the kubeconfig format (clientcmd's v1
// Config) the plugin understands.
type rawKubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string      `json:"name"`
		Cluster kubeCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string   `json:"name"`
		User kubeUser `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

// kubeCluster and kubeUser are entries of a kubeconfig's clusters and
// users.
type (
	kubeCluster struct {
		Server                   string `json:"server"`
		CertificateAuthority     string `json:"certificate-authority"`
		CertificateAuthorityData string `json:"certificate-authority-data"`
		InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
		TLSServerName            string `json:"tls-server-name"`
		ProxyURL                 string `json:"proxy-url"`
	}
	kubeUser struct {
		Token                 string          `json:"token"`
		TokenFile             string          `json:"tokenFile"`
		ClientCertificate     string          `json:"client-certificate"`
		ClientCertificateData string          `json:"client-certificate-data"`
		ClientKey             string          `json:"client-key"`
		ClientKeyData         string          `json:"client-key-data"`
		Username              string          `json:"username"`
		Password              string          `json:"password"`
		Exec                  json.RawMessage `json:"exec"`
		AuthProvider          json.RawMessage `json:"auth-provider"`
	}
)

// LoadKubeconfig reads the kubeconfig at path and returns the credentials
// of its current context (or of its only context). Relative file paths in
// it are relative to the kubeconfig's directory, as with kubectl.
// Credential plugins (exec, auth-provider) are not supported. The
// kubeconfig and every file it names (certificate-authority,
// client-certificate, client-key, tokenFile) must pass filetrust's rules,
// as whoever can write them chooses the API server and the credentials.
// Errors wrap ErrKubeconfig and name the path; unsafe files also wrap
// filetrust.ErrUnsafe.
func LoadKubeconfig(path string) (*Credentials, error) {
	data, err := readSmall("kubeconfig", path)
	if err != nil { // names the path
		return nil, fmt.Errorf("%w: %w", ErrKubeconfig, err)
	}
	c, err := parseKubeconfig(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrKubeconfig, path, err)
	}
	return c, nil
}

// parseKubeconfig parses kubeconfig YAML or JSON; dir resolves relative
// file paths. The current context names a cluster (the server and how to
// trust it) and a user (the credentials).
func parseKubeconfig(data []byte, dir string) (*Credentials, error) {
	var kc rawKubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	name, cluster, user, err := kc.context()
	if err != nil {
		return nil, err
	}
	out := &Credentials{TLS: &tls.Config{MinVersion: tls.VersionTLS12}}

	found := false
	for _, c := range kc.Clusters {
		if c.Name == cluster {
			found = true
			if err := out.setCluster(c.Cluster, dir); err != nil {
				return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("context %q: cluster %q is not defined", name, cluster)
	}

	found = false
	for _, u := range kc.Users {
		if u.Name == user {
			found = true
			if err := out.setUser(u.User, dir); err != nil {
				return nil, fmt.Errorf("user %q: %w", u.Name, err)
			}
		}
	}
	if !found && user != "" {
		return nil, fmt.Errorf("context %q: user %q is not defined", name, user)
	}
	if out.Server.Scheme == "http" && (out.Token != "" || out.Password != "") {
		return nil, fmt.Errorf("server %s is plain http: credentials would travel in clear text", out.Server)
	}
	return out, nil
}

// context returns the current context (the only one when none is
// current): its name and the names of its cluster and user.
func (kc *rawKubeconfig) context() (name, cluster, user string, err error) {
	name = kc.CurrentContext
	if name == "" {
		if len(kc.Contexts) != 1 {
			return "", "", "", fmt.Errorf("no current-context, and %d contexts to choose from", len(kc.Contexts))
		}
		name = kc.Contexts[0].Name
	}
	found := false
	for _, c := range kc.Contexts {
		if c.Name == name { // the last of duplicates
			found, cluster, user = true, c.Context.Cluster, c.Context.User
		}
	}
	if !found {
		return "", "", "", fmt.Errorf("context %q is not defined", name)
	}
	return name, cluster, user, nil
}

// setCluster sets the server and the TLS trust of cl (its server must be
// an http(s) URL, reached without a proxy).
func (out *Credentials) setCluster(cl kubeCluster, dir string) error {
	u, err := url.Parse(cl.Server)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("server %q is not an http(s) URL", cl.Server)
	}
	out.Server = u
	if cl.ProxyURL != "" {
		return fmt.Errorf("proxy-url is not supported")
	}
	out.TLS.ServerName = cl.TLSServerName
	out.TLS.InsecureSkipVerify = cl.InsecureSkipTLSVerify
	ca, err := dataOrFile(cl.CertificateAuthorityData, cl.CertificateAuthority, dir, "certificate-authority")
	if err != nil {
		return err
	}
	if ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return fmt.Errorf("certificate-authority holds no PEM certificate")
		}
		out.TLS.RootCAs = pool
	}
	return nil
}

// setUser sets the credentials of us: a token (inline or from tokenFile),
// basic credentials and a client certificate. Credential plugins are
// refused.
func (out *Credentials) setUser(us kubeUser, dir string) error {
	if len(us.Exec) > 0 && string(us.Exec) != "null" || len(us.AuthProvider) > 0 && string(us.AuthProvider) != "null" {
		return fmt.Errorf("credential plugins (exec, auth-provider) are not supported; use a token, tokenFile or a client certificate")
	}
	out.Token = us.Token
	if out.Token == "" && us.TokenFile != "" {
		b, err := readSmall("tokenFile", resolve(dir, us.TokenFile))
		if err != nil {
			return fmt.Errorf("tokenFile: %w", err)
		}
		out.Token = strings.TrimSpace(string(b))
	}
	out.Username, out.Password = us.Username, us.Password
	cert, err := dataOrFile(us.ClientCertificateData, us.ClientCertificate, dir, "client-certificate")
	if err != nil {
		return err
	}
	key, err := dataOrFile(us.ClientKeyData, us.ClientKey, dir, "client-key")
	if err != nil {
		return err
	}
	switch {
	case cert != nil && key != nil:
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		out.TLS.Certificates = []tls.Certificate{pair}
	case cert != nil || key != nil:
		return fmt.Errorf("a client certificate needs both client-certificate and client-key")
	}
	return nil
}

// dataOrFile returns base64-decoded data, else the named file's content,
// else nil.
func dataOrFile(data, file, dir, what string) ([]byte, error) {
	if data != "" {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(data))
		if err != nil {
			return nil, fmt.Errorf("%s-data is not base64: %w", what, err)
		}
		return b, nil
	}
	if file == "" {
		return nil, nil
	}
	b, err := readSmall(what, resolve(dir, file))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}

// resolve makes a kubeconfig's relative path relative to its directory.
func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// readSmall reads a file the kubeconfig names (or the kubeconfig itself)
// of at most maxFile bytes, when only root or the caller can have chosen
// its content (filetrust.ReadFile: a planted link, a file another user owns
// or may write, or one in such a directory is refused, without blocking on
// a FIFO).
func readSmall(what, path string) ([]byte, error) {
	return filetrust.ReadFile(what, path, maxFile)
}
