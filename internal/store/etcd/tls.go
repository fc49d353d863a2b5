package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// tlsConfig builds the client TLS configuration from the files cfg names,
// or returns nil when none is set. Messages name the files, never their
// contents.
func tlsConfig(cfg Config) (*tls.Config, error) {
	if cfg.CAFile == "" && cfg.CertFile == "" && cfg.KeyFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: caFile: %w", ErrConfig, err)
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
		if _, err := os.Stat(cfg.CertFile); err != nil {
			return nil, fmt.Errorf("%w: certFile: %w", ErrConfig, err)
		}
		if _, err := os.Stat(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("%w: keyFile: %w", ErrConfig, err)
		}
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			// The parse error may quote PEM fragments: say only which files.
			return nil, fmt.Errorf("%w: certFile %s and keyFile %s are not a matching PEM certificate and key", ErrConfig, cfg.CertFile, cfg.KeyFile)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
