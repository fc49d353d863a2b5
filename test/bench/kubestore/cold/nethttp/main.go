// Command nethttp is the cold-start measurement's baseline: the
// kubeconfig read by internal/podinfo (no client-go) and one GET of a
// prototype object with net/http.
//
//	nethttp KUBECONFIG NAME
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/ipkeeper/ipkeeper/internal/podinfo"
)

func main() {
	c, err := podinfo.LoadKubeconfig(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	req, err := http.NewRequest(http.MethodGet, c.Server.String()+"/apis/ipkeeper.io/v1alpha1/protoblocks/"+os.Args[2], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("Accept", "application/json")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.TLS, ForceAttemptHTTP2: true}}
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, resp.Status, err)
		os.Exit(1)
	}
	fmt.Println(len(raw))
}
