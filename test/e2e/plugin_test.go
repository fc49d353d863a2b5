package e2e

import (
	"encoding/json"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/ipkeeper/ipkeeper/test/e2e/cnirun"
)

// anyNetNS is CNI_NETNS for direct IPAM calls: an IPAM plugin never enters
// the namespace, but the variable is required for ADD and CHECK. It must not
// be the plugin's own namespace (skel rejects that, see TestBadInput), and a
// path that is no namespace at all passes skel's check.
const anyNetNS = "/run/netns/ipk-e2e-never-entered"

// directCall is a call of ipkeeper as the main plugin's delegate makes it.
func directCall(command, containerID string, stdin []byte) cnirun.Call {
	return cnirun.Call{
		Command: command, ContainerID: containerID, NetNS: anyNetNS, IfName: "eth0", Path: toolsDir, Stdin: stdin,
	}
}

// ipamRun invokes ipkeeper directly as the main plugin's delegate would,
// with stdin the main plugin's configuration.
func ipamRun(t *testing.T, command, containerID string, stdin []byte) cnirun.Output {
	t.Helper()
	out, err := cnirun.Run(ctxT(t), ipkeeperBin, directCall(command, containerID, stdin))
	if err != nil {
		t.Fatalf("%s %s: %v\n%v", command, containerID, err, out)
	}
	return out
}

// ipamAdd runs ADD and returns the result converted to the current version;
// it fails the test unless ADD succeeded with the config's cniVersion.
func ipamAdd(t *testing.T, containerID string, stdin []byte) *current.Result {
	t.Helper()
	out := ipamRun(t, "ADD", containerID, stdin)
	if out.ExitCode != 0 {
		t.Fatalf("ADD %s failed:\n%v", containerID, out)
	}
	return parseResult(t, confVersion(t, stdin), out.Stdout)
}

// parseResult decodes a result printed for cniVersion want.
func parseResult(t *testing.T, want string, stdout []byte) *current.Result {
	t.Helper()
	got, err := create.DecodeVersion(stdout)
	if err != nil || got != want {
		t.Fatalf("result cniVersion %q (%v), want %q:\n%s", got, err, want, stdout)
	}
	res, err := create.Create(want, stdout)
	if err != nil {
		t.Fatalf("decoding the %s result: %v\n%s", want, err, stdout)
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatalf("converting the %s result: %v\n%s", want, err, stdout)
	}
	return cur
}

// wantCNIError checks a failed call: non-zero exit, a CNI error object on
// stdout with the given code. It returns the error.
func wantCNIError(t *testing.T, what string, out cnirun.Output, code uint) *cnirun.Error {
	t.Helper()
	if out.ExitCode == 0 {
		t.Fatalf("%s: want failure with code %d, got success:\n%v", what, code, out)
	}
	e, err := out.CNIError()
	if err != nil {
		t.Fatalf("%s: %v\n%v", what, err, out)
	}
	if e.Code != code {
		t.Fatalf("%s: code %d, want %d: %v", what, e.Code, code, e)
	}
	return e
}

func confVersion(t *testing.T, conf []byte) string {
	t.Helper()
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(conf, &v); err != nil {
		t.Fatalf("config: %v", err)
	}
	return v.CNIVersion
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
