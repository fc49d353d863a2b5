package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/test/bench/latency"
)

// Both plugins allocate from a pool of this CIDR with blocks of this size,
// for pods of this network on this node.
const (
	poolCIDR  = "10.0.0.0/12"
	blockSize = 26
	network   = "k8s-pod-network"
	node      = "proc-node"
)

// errPlugin means a plugin process exited with a failure.
var errPlugin = errors.New("plugin failed")

// plugin is one IPAM binary run as CNI processes with its configuration.
type plugin struct {
	name string
	bin  string
	conf []byte
	env  []string
}

// ipkeeperPlugin is ipkeeper's plugin on the etcd datastore under prefix,
// its node lock in lockDir.
func ipkeeperPlugin(bin, endpoint, prefix, lockDir string) (*plugin, error) {
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": network, "type": "bridge",
		"ipam": map[string]any{
			"type": "ipkeeper", "nodeName": node,
			"datastore": map[string]any{"type": "etcd", "endpoints": []string{endpoint}, "prefix": prefix},
			"ranges":    [][]map[string]string{{{"subnet": poolCIDR}}},
			"blockSize": blockSize,
		},
	})
	return &plugin{name: "ipkeeper", bin: bin, conf: conf, env: []string{datastore.LockDirEnv + "=" + lockDir}}, err
}

// calicoPlugin is calico-ipam on its etcdv3 datastore, as Calico's CNI
// plugin configures it: the datastore keys at the top of the network
// configuration, the IPAM plugin by type. Its host-wide IPAM lock file is
// lockFile; it logs errors only, to its standard error.
func calicoPlugin(bin, endpoint, lockFile string) (*plugin, error) {
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": network, "type": "calico",
		"datastore_type": "etcdv3", "etcd_endpoints": endpoint,
		"nodename": node, "log_level": "error", "ipam_lock_file": lockFile,
		"ipam": map[string]any{"type": "calico-ipam"},
	})
	return &plugin{name: "calico", bin: bin, conf: conf}, err
}

// call runs one CNI command of pod k as a new process, as a runtime does
// (configuration on stdin, parameters in CNI_* variables, the caller's
// other variables inherited), and returns its wall time, process start
// to exit, and the CPU time (user and system) it used.
func (p *plugin) call(ctx context.Context, cmd string, k int) (wall, cpu time.Duration, err error) {
	cid := fmt.Sprintf("%064x", k)
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", k, k)
	c := exec.CommandContext(ctx, p.bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_") {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+cid, "CNI_IFNAME=eth0",
		// Not a namespace: an IPAM plugin never enters it.
		"CNI_NETNS=/var/run/netns/cni-"+uid,
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-%d;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", k, cid, uid),
		"CNI_PATH="+filepath.Dir(p.bin))
	c.Env = append(c.Env, p.env...)
	c.Stdin = bytes.NewReader(p.conf)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	t0 := time.Now()
	err = c.Run()
	wall = time.Since(t0)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s %s pod-%d: %w: %s %s", errPlugin, p.name, cmd, k, err,
			strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()))
	}
	return wall, c.ProcessState.UserTime() + c.ProcessState.SystemTime(), nil
}

// outcome is one plugin's part of one run: the successful calls'
// latencies, wall time and CPU time, the failed calls.
type outcome struct {
	latency.Result
	CPU      time.Duration
	Errors   int
	FirstErr string
}

func (o *outcome) fail(err error) {
	o.Errors++
	if o.FirstErr == "" {
		o.FirstErr = err.Error()
	}
}

// add merges b into o; wall times add up (b ran at another time).
func (o *outcome) add(b outcome) {
	o.N += b.N
	o.Wall += b.Wall
	o.Lat = append(o.Lat, b.Lat...)
	o.CPU += b.CPU
	o.Errors += b.Errors
	if o.FirstErr == "" {
		o.FirstErr = b.FirstErr
	}
}

// concurrently runs cmd for pods from conc processes at a time.
func (p *plugin) concurrently(ctx context.Context, cmd string, pods []int, conc int) outcome {
	var next atomic.Int64
	var mu sync.Mutex
	var o outcome
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(pods); i = int(next.Add(1)) - 1 {
				d, cpu, err := p.call(ctx, cmd, pods[i])
				mu.Lock()
				if err != nil {
					o.fail(err)
				} else {
					o.Lat = append(o.Lat, d)
					o.CPU += cpu
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	o.Wall, o.N = time.Since(start), len(o.Lat)
	return o
}
