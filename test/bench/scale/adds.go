package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ipkeeper/ipkeeper/test/bench/latency"
	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// plugins runs the ipkeeper plugin as a process per call on the measured
// nodes, each through its node's ipkeeper-agent, as a runtime runs it.
type plugins struct {
	bin   string
	nodes []string
	confs [][]byte
	locks []string
	seq   int
}

// newPlugins writes each measured node's network configuration: the
// generated pools (an address of each family), the kubernetes datastore
// partition prefix with the node's kubeconfig, and its agent's socket.
func newPlugins(bin, dir, prefix string, nodes, kubeconfigs, sockets []string) (*plugins, error) {
	p := &plugins{bin: bin, nodes: nodes}
	for i, n := range nodes {
		conf, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": network, "type": "bridge",
			"ipam": map[string]any{"type": "ipkeeper", "nodeName": n, "pools": []string{poolV4, poolV6},
				"datastore":  map[string]any{"type": "kubernetes", "kubeconfig": kubeconfigs[i], "prefix": prefix},
				"kubernetes": map[string]any{"agentSocket": sockets[i], "kubeconfig": kubeconfigs[i]}}})
		if err != nil {
			return nil, err
		}
		lock := filepath.Join(dir, "lock-"+n)
		if err := os.MkdirAll(lock, 0o700); err != nil {
			return nil, err
		}
		p.confs = append(p.confs, conf)
		p.locks = append(p.locks, lock)
	}
	return p, nil
}

// attachment is one ADD that succeeded.
type attachment struct {
	node, id string
	addrs    []netip.Addr
	took     time.Duration
	done     time.Time
}

func (p *plugins) call(ctx context.Context, verb string, node int, id string) (cnirun.Output, error) {
	out, err := cnirun.Run(ctx, p.bin, cnirun.Call{Command: verb, ContainerID: id, NetNS: "/var/run/netns/" + id, IfName: "eth0",
		Path: filepath.Dir(p.bin), Stdin: p.confs[node], Env: []string{"IPKEEPER_LOCK_DIR=" + p.locks[node]}})
	if err != nil {
		return out, err
	}
	if out.ExitCode != 0 {
		return out, fmt.Errorf("%s %s on %s: exit %d: %s", verb, id, p.nodes[node], out.ExitCode, strings.TrimSpace(string(out.Stdout)))
	}
	return out, nil
}

// add runs one ADD on measured node i.
func (p *plugins) add(ctx context.Context, i int) (attachment, error) {
	p.seq++
	id := fmt.Sprintf("add-%s-%d", p.nodes[i], p.seq)
	out, err := p.call(ctx, "ADD", i, id)
	if err != nil {
		return attachment{}, err
	}
	var res struct {
		IPs []struct {
			Address netip.Prefix `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out.Stdout, &res); err != nil || len(res.IPs) == 0 {
		return attachment{}, fmt.Errorf("ADD %s: result %q: %v", id, out.Stdout, err)
	}
	a := attachment{node: p.nodes[i], id: id, took: out.Duration, done: time.Now()}
	for _, ip := range res.IPs {
		a.addrs = append(a.addrs, ip.Address.Addr())
	}
	return a, nil
}

// del runs the DEL of a.
func (p *plugins) del(ctx context.Context, a attachment) error {
	for i, n := range p.nodes {
		if n == a.node {
			_, err := p.call(ctx, "DEL", i, a.id)
			return err
		}
	}
	return fmt.Errorf("no measured node %s", a.node)
}

// addResult is a series of warm ADDs, one after another over the measured
// nodes, each followed by its DEL (not measured).
type addResult struct {
	lat       latency.Result
	mapLat    []time.Duration // ADD's end to the map event after which it shows the address
	mapMissed int             // ADDs the map did not show within the wait
	failed    int
	firstErr  string
}

// runAdds runs n ADDs (each then DEL'd); for the first mapN of them it
// also waits for the map's event showing the ADD (m may be nil).
func (p *plugins) runAdds(ctx context.Context, n, mapN int, m *mapEvents, mapWait time.Duration) addResult {
	var r addResult
	t0 := time.Now()
	for k := range n {
		a, err := p.add(ctx, k%len(p.nodes))
		if err != nil {
			r.failed++
			if r.firstErr == "" {
				r.firstErr = err.Error()
			}
			continue
		}
		r.lat.N++
		r.lat.Lat = append(r.lat.Lat, a.took)
		if m != nil && k < mapN {
			if d, ok := m.shown(ctx, a, mapWait); ok {
				r.mapLat = append(r.mapLat, d)
			} else {
				r.mapMissed++
			}
		}
		if err := p.del(ctx, a); err != nil && r.firstErr == "" {
			r.firstErr = err.Error()
		}
	}
	r.lat.Wall = time.Since(t0)
	return r
}

// mapEvents follows the address map's event stream (/api/events, what
// the page listens to): the time of each update event.
type mapEvents struct {
	base string
	mu   sync.Mutex
	last time.Time
	wake chan struct{}
}

// followMap subscribes to the map's events until ctx ends.
func followMap(ctx context.Context, base string) (*mapEvents, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"api/events", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %sapi/events: %s", base, resp.Status)
	}
	m := &mapEvents{base: base, wake: make(chan struct{})}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "event: update" {
				m.mu.Lock()
				m.last = time.Now()
				close(m.wake)
				m.wake = make(chan struct{})
				m.mu.Unlock()
			}
		}
	}()
	return m, nil
}

// shows reports whether the map's search finds a's first address under
// a's container ID.
func (m *mapEvents) shows(a attachment) bool {
	var v struct {
		Results []struct {
			Addr netip.Addr `json:"addr"`
		} `json:"results"`
	}
	if getJSON(m.base+"api/search?q="+url.QueryEscape(a.id), &v) != nil {
		return false
	}
	for _, r := range v.Results {
		if r.Addr == a.addrs[0] {
			return true
		}
	}
	return false
}

// shown waits for the first update event after which the map shows a,
// and returns the time from a's ADD returning to that event (zero when
// an event before the ADD returned already carried it).
func (m *mapEvents) shown(ctx context.Context, a attachment, limit time.Duration) (time.Duration, bool) {
	deadline := time.After(limit)
	for {
		m.mu.Lock()
		wake := m.wake
		m.mu.Unlock()
		if m.shows(a) {
			m.mu.Lock()
			last := m.last
			m.mu.Unlock()
			return max(0, last.Sub(a.done)), true
		}
		select {
		case <-wake:
		case <-deadline:
			return 0, false
		case <-ctx.Done():
			return 0, false
		}
	}
}
