package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tokenLifetime is what ServiceAccountToken asks for: longer than any test.
const tokenLifetime = 24 * time.Hour

// ServiceAccountToken returns a token for the ServiceAccount namespace/name
// from the TokenRequest API (as a kubelet's projected token), creating the
// ServiceAccount when it does not exist (its namespace must).
func (s *Server) ServiceAccountToken(t testing.TB, namespace, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tok, err := s.serviceAccountToken(ctx, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *Server) serviceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	sas := s.Client.CoreV1().ServiceAccounts(namespace)
	if _, err := sas.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		if _, err := sas.Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("kubetest: create ServiceAccount %s/%s: %w", namespace, name, err)
		}
	} else if err != nil {
		return "", fmt.Errorf("kubetest: get ServiceAccount %s/%s: %w", namespace, name, err)
	}
	secs := int64(tokenLifetime / time.Second)
	tr, err := sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("kubetest: TokenRequest for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount namespace/name with a TokenRequest token (the account is
// created when missing) and returns its path, inside the server's
// directory. What the account may do is what RBAC grants it — for the
// shipped accounts, the roles in deploy/.
func (s *Server) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	tok := s.ServiceAccountToken(t, namespace, name)
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(s.Dir, fmt.Sprintf("sa-%s-%s-*.kubeconfig", namespace, name))
	if err != nil {
		t.Fatal(err)
	}
	path := f.Name()
	f.Close()
	user := "system:serviceaccount:" + namespace + ":" + name
	if err := writeKubeconfig(path, s.URL, ca, user, tok); err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(path)
}
