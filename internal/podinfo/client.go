package podinfo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// maxBody bounds an API response.
const maxBody = 8 << 20

// metadataOnly asks the API server for an object's metadata alone (a
// PartialObjectMetadata); servers that cannot send it send the object.
const metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// Client reads pods, namespaces and nodes from one API server.
type Client struct {
	base  *url.URL
	http  *http.Client
	creds *Credentials
}

// New returns a client for the API server and credentials c. All
// requests share one connection (HTTP/2 when the server offers it): with
// net/http's default, the three GETs of a Lookup dial three TLS
// connections when they start together, and the concurrent Lookup is no
// faster than three GETs in a row; with one shared connection it is
// (BenchmarkLookup; docs/BENCHMARKS.md, "Controller, address map,
// pod-aware ADD").
func New(c *Credentials) *Client {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     c.TLS.Clone(),
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
		MaxConnsPerHost:     1,
	}
	return &Client{base: c.Server, http: &http.Client{Transport: tr}, creds: c}
}

// NewFromKubeconfig returns a client with the credentials of the
// kubeconfig at path (see LoadKubeconfig).
func NewFromKubeconfig(path string) (*Client, error) {
	c, err := LoadKubeconfig(path)
	if err != nil {
		return nil, err
	}
	return New(c), nil
}

// Close releases idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// rawMeta is ObjectMeta's part podinfo reads.
type rawMeta struct {
	Namespace   string            `json:"namespace"`
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Owners      []struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Name       string `json:"name"`
		UID        string `json:"uid"`
		Controller *bool  `json:"controller"`
	} `json:"ownerReferences"`
}

func (m rawMeta) object() Object {
	o := Object{Namespace: m.Namespace, Name: m.Name, UID: m.UID, Labels: m.Labels, Annotations: m.Annotations}
	for _, r := range m.Owners {
		if r.Controller != nil && *r.Controller {
			o.Owner = &Owner{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID}
			break
		}
	}
	return o
}

// Pod reads the metadata of a pod. A missing pod is ErrPodNotFound.
func (c *Client) Pod(ctx context.Context, namespace, name string) (*Object, error) {
	var o struct {
		Metadata rawMeta `json:"metadata"`
	}
	what := fmt.Sprintf("pod %s/%s", namespace, name)
	if err := c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), metadataOnly, &o, what, ErrPodNotFound); err != nil {
		return nil, err
	}
	obj := o.Metadata.object()
	return &obj, nil
}

// Namespace reads the metadata of a namespace.
func (c *Client) Namespace(ctx context.Context, name string) (*Object, error) {
	var o struct {
		Metadata rawMeta `json:"metadata"`
	}
	if err := c.get(ctx, "/api/v1/namespaces/"+url.PathEscape(name), metadataOnly, &o, "namespace "+name, ErrPodNotFound); err != nil {
		return nil, err
	}
	obj := o.Metadata.object()
	return &obj, nil
}

// Node reads a node's metadata and pod CIDRs. A missing node is
// ErrNodeNotFound.
func (c *Client) Node(ctx context.Context, name string) (*Node, error) {
	var o struct {
		Metadata rawMeta `json:"metadata"`
		Spec     struct {
			PodCIDR  string   `json:"podCIDR"`
			PodCIDRs []string `json:"podCIDRs"`
		} `json:"spec"`
	}
	what := "node " + name
	if err := c.get(ctx, "/api/v1/nodes/"+url.PathEscape(name), "application/json", &o, what, ErrNodeNotFound); err != nil {
		return nil, err
	}
	return NewNode(o.Metadata.object(), o.Spec.PodCIDR, o.Spec.PodCIDRs)
}

// NewNode returns the Node of a node's metadata and its spec.podCIDR and
// spec.podCIDRs: the latter, or the former on old servers, masked. A
// value that is not a CIDR wraps ErrUnavailable and names the node.
func NewNode(meta Object, podCIDR string, podCIDRs []string) (*Node, error) {
	n := &Node{Object: meta}
	cidrs := podCIDRs
	if len(cidrs) == 0 && podCIDR != "" {
		cidrs = []string{podCIDR}
	}
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%w: node %s: spec.podCIDRs holds %q, not a CIDR", ErrUnavailable, meta.Name, s)
		}
		n.PodCIDRs = append(n.PodCIDRs, p.Masked())
	}
	return n, nil
}

// Lookup reads, concurrently, the pod and its namespace (when pod is not
// empty) and the node. The first error in that order is returned.
func (c *Client) Lookup(ctx context.Context, namespace, pod, node string) (*Info, error) {
	var info Info
	var errs [3]error
	var wg sync.WaitGroup
	if pod != "" {
		wg.Go(func() { info.Pod, errs[0] = c.Pod(ctx, namespace, pod) })
		wg.Go(func() { info.Namespace, errs[1] = c.Namespace(ctx, namespace) })
	}
	wg.Go(func() { info.Node, errs[2] = c.Node(ctx, node) })
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return &info, nil
}

// apiStatus is the Status object the API server sends with errors.
type apiStatus struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

// get GETs path into dst. what names the object in errors; notFound is
// the error a 404 wraps.
func (c *Client) get(ctx context.Context, path, accept string, dst any, what string, notFound error) error {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	// Served from the API server's watch cache rather than a quorum read
	// of etcd: cheaper for the server (one GET per ADD on every node), and
	// as fresh as the watch that told the kubelet about the pod.
	u.RawQuery = "resourceVersion=0"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "ipkeeper-cni")
	switch {
	case c.creds.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.creds.Token)
	case c.creds.Username != "":
		req.SetBasicAuth(c.creds.Username, c.creds.Password)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is in the message already
		}
		return fmt.Errorf("%w: GET %s (%s): %w", ErrUnavailable, u.Redacted(), what, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("%w: reading %s: %w", ErrUnavailable, what, err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("%w: %s: the answer is larger than %d bytes", ErrUnavailable, what, maxBody)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, dst); err != nil {
			return fmt.Errorf("%w: %s: undecodable answer: %w", ErrUnavailable, what, err)
		}
		return nil
	}
	var st apiStatus
	_ = json.Unmarshal(body, &st)
	msg := st.Message
	if msg == "" {
		msg = strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s: %s", notFound, what, msg)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: GET %s: %d %s", ErrDenied, what, resp.StatusCode, msg)
	default:
		return fmt.Errorf("%w: GET %s: %d %s", ErrUnavailable, what, resp.StatusCode, msg)
	}
}
