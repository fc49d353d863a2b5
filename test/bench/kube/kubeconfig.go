package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ipkeeper/ipkeeper/internal/kubetest"
)

// serviceAccountKubeconfig writes into dir a kubeconfig that authenticates
// as the ServiceAccount namespace/name with a TokenRequest token, as a
// kubelet's projected token would (kubetest's ServiceAccountKubeconfig
// does the same for tests; this program has no testing.TB). The account
// must exist: the shipped deploy/ makes kube-system/ipkeeper-node.
func serviceAccountKubeconfig(ctx context.Context, srv *kubetest.Server, dir, namespace, name string) (string, error) {
	secs := int64(24 * 3600)
	tr, err := srv.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for %s/%s: %w", namespace, name, err)
	}
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		return "", err
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: user}
	cfg.CurrentContext = "bench"
	path := filepath.Join(dir, fmt.Sprintf("sa-%s-%s.kubeconfig", namespace, name))
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, os.Chmod(path, 0o600)
}
