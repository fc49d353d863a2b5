package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

const (
	// readyTimeout bounds the wait for /readyz: seconds on an idle
	// machine, much more when other test binaries compete for the CPUs.
	readyTimeout = 3 * time.Minute
	// applyTimeout bounds the bootstrap after /readyz (system namespaces,
	// deploy/ objects).
	applyTimeout = 2 * time.Minute
	adminToken   = "kubetest-admin-token"
	// adminUser is the static-token user (in system:masters) behind
	// AdminKubeconfig.
	adminUser = "kubetest-admin"
)

// process is the kube-apiserver child.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// logTail returns the end of the API server's log for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// launch runs kube-apiserver on a free port (retrying when the port picked
// was taken meanwhile), waits for /readyz and fills in the admin access.
func (s *Server) launch(bin string, p *pki) error {
	tokens := filepath.Join(s.Dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+","+adminUser+",kubetest-admin-uid,\"system:masters\"\n"), 0o600); err != nil {
		return err
	}
	var lastErr error
	for range 3 {
		port, err := etcdtest.FreePort()
		if err != nil {
			return err
		}
		logFile := filepath.Join(s.Dir, "apiserver.log")
		args := []string{
			"--etcd-servers=" + s.etcd.Endpoint,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", port),
			"--tls-cert-file=" + p.certFile,
			"--tls-private-key-file=" + p.keyFile,
			"--client-ca-file=" + p.caFile,
			"--token-auth-file=" + tokens,
			"--authorization-mode=Node,RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.saPubFile,
			"--service-account-signing-key-file=" + p.saKeyFile,
			"--service-cluster-ip-range=10.0.0.0/24",
			"--allow-privileged=true",
			"--disable-admission-plugins=ServiceAccount",
			"--endpoint-reconciler-type=none",
			"--profiling=false",
			"--cert-dir=" + filepath.Join(s.Dir, "cert-dir"),
		}
		lf, err := os.Create(logFile)
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = childAttr()
		if err := cmd.Start(); err != nil {
			lf.Close()
			return fmt.Errorf("kubetest: start %s: %w", bin, err)
		}
		proc := &process{cmd: cmd, exited: make(chan struct{}), log: logFile}
		go func() {
			_ = cmd.Wait()
			lf.Close()
			close(proc.exited)
		}()
		s.proc = proc
		s.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
		err = waitReady(s.URL, p.caPEM, proc)
		if err == nil {
			return s.adminAccess(p)
		}
		lastErr = err
		proc.kill()
		s.proc = nil
		if !strings.Contains(proc.logTail(), "address already in use") {
			break
		}
	}
	return lastErr
}

// waitReady polls /readyz until it answers 200 "ok", the process exits, or
// readyTimeout passes.
func waitReady(url string, caPEM []byte, proc *process) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(readyTimeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-proc.exited:
			return fmt.Errorf("kubetest: kube-apiserver exited before ready: %v\n%s", proc.cmd.ProcessState, proc.logTail())
		case <-time.After(100 * time.Millisecond):
		}
		req, _ := http.NewRequest(http.MethodGet, url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := hc.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
			return nil
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	return fmt.Errorf("kubetest: kube-apiserver not ready after %v (last: %s)\n%s", readyTimeout, last, proc.logTail())
}

// adminAccess writes AdminKubeconfig and builds Config and Client.
func (s *Server) adminAccess(p *pki) error {
	s.AdminKubeconfig = filepath.Join(s.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(s.AdminKubeconfig, s.URL, p.caPEM, adminUser, adminToken); err != nil {
		return err
	}
	cfg := &rest.Config{
		Host:            s.URL,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM},
		QPS:             1000,
		Burst:           2000,
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s.Config, s.Client = cfg, cs
	return nil
}

// writeKubeconfig writes a kubeconfig (mode 0600) for one token user.
func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	c.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user}
	c.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*c, path)
}

// waitNamespaces waits until the API server's bootstrap has made the named
// namespaces.
func (s *Server) waitNamespaces(ctx context.Context, names ...string) error {
	for _, n := range names {
		for {
			_, err := s.Client.CoreV1().Namespaces().Get(ctx, n, metav1GetOptions)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("kubetest: namespace %q not created by the API server: %w", n, errors.Join(err, ctx.Err()))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
