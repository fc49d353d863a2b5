package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/filetrust"
)

// maxTLSFile bounds each TLS file.
const maxTLSFile = 1 << 20

// tlsConfig builds the client TLS configuration from the files cfg names,
// or returns nil when none is set. Whoever can write these files chooses
// which etcd the plugin trusts and as whom it writes, so each is read
// through filetrust (owned by root or the caller, not writable by group
// or others, reached only through directories and links of root's or the
// caller's); a refusal also wraps filetrust.ErrUnsafe. Messages name the
// files, never their contents.
func tlsConfig(cfg Config) (*tls.Config, error) {
	if cfg.CAFile == "" && cfg.CertFile == "" && cfg.KeyFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := filetrust.ReadFile("caFile", cfg.CAFile, maxTLSFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: caFile %s holds no PEM certificate", ErrConfig, cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, fmt.Errorf("%w: certFile and keyFile must be given together", ErrConfig)
	}
	if cfg.CertFile != "" {
		certPEM, err := filetrust.ReadFile("certFile", cfg.CertFile, maxTLSFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		keyPEM, err := filetrust.ReadFile("keyFile", cfg.KeyFile, maxTLSFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// The parse error may quote PEM fragments: say only which files.
			return nil, fmt.Errorf("%w: certFile %s and keyFile %s are not a matching PEM certificate and key", ErrConfig, cfg.CertFile, cfg.KeyFile)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
