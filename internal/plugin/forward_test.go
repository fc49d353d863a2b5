package plugin

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// In a container (the agent), an earlier sandbox's namespace counts as
// gone only where its directory is visible, and never by a /proc/PID
// path: the container's /proc does not show the host's PIDs, and taking
// over a live sandbox's addresses would give one address two owners. On
// the host the same paths count as gone.
func TestNetnsGoneInContainer(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		path                string
		onHost, inContainer bool
	}{
		{"/proc/999999999/ns/net", true, false},
		{filepath.Join(dir, "missing-dir", "cni-1"), true, false},
		{filepath.Join(dir, "cni-2"), true, true},
	} {
		host, _ := (&Plugin{}).netnsGone(tc.path)
		cont, why := (&Plugin{InContainer: true}).netnsGone(tc.path)
		if host != tc.onHost || cont != tc.inContainer {
			t.Errorf("%s: gone on the host %v, in a container %v (%s); want %v, %v", tc.path, host, cont, why, tc.onHost, tc.inContainer)
		}
	}
}

// withNodeName sets ipam.nodeName, keeping the rest of the config.
func TestWithNodeName(t *testing.T) {
	out, err := withNodeName([]byte(`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"ipkeeper","nodeName":"old","ranges":[[{"subnet":"fd00::/64"}]]},"x":1}`), "node-b")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name string `json:"name"`
		X    int    `json:"x"`
		IPAM struct {
			NodeName string  `json:"nodeName"`
			Ranges   [][]any `json:"ranges"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.IPAM.NodeName != "node-b" || got.Name != "n" || got.X != 1 || len(got.IPAM.Ranges) != 1 {
		t.Fatalf("withNodeName: %s (%v)", out, err)
	}
	if _, err := withNodeName([]byte(`{"ipam": 3}`), "n"); err == nil {
		t.Fatal("withNodeName of an ipam that is not an object succeeded")
	}
}
