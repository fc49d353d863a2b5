package controller

import (
	"net/http"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var metav1GetOptions = metav1.GetOptions{}

func netipPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func httpNewRequest(method, url string) (*http.Request, error) {
	return http.NewRequest(method, url, nil)
}
