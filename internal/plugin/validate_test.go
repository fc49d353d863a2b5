package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// skelCode runs one invocation as Main does, skel reading the CNI_*
// variables and stdin and calling h's verbs, and returns its CNI code (0
// for success).
func (h *harness) skelCode(t *testing.T, command string, args *skel.CmdArgs) uint {
	t.Helper()
	env := map[string]string{"CNI_COMMAND": command, "CNI_CONTAINERID": args.ContainerID, "CNI_NETNS": args.Netns,
		"CNI_IFNAME": args.IfName, "CNI_ARGS": args.Args, "CNI_PATH": args.Path, "CNI_NETNS_OVERRIDE": args.NetnsOverride}
	if command == "DEL" {
		env["CNI_NETNS_OVERRIDE"] = "1" // as Main sets it
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	stdin := filepath.Join(t.TempDir(), "stdin")
	if err := os.WriteFile(stdin, args.StdinData, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(stdin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = saved }()
	h.out.Reset()
	e := skel.PluginMainFuncsWithError(skel.CNIFuncs{Add: h.p.Add, Del: h.p.Del, Check: h.p.Check, GC: h.p.GC, Status: h.p.Status}, Versions, "")
	if e == nil {
		return 0
	}
	return e.Code
}

// TestValidateAsThePlugin: for each input, Validate answers the code the
// plugin answers when skel and the verbs check it (0 when both accept
// it), which is the code the case names.
func TestValidateAsThePlugin(t *testing.T) {
	h := newHarness(t)
	file := filepath.Join(t.TempDir(), "not-a-netns")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := func(ver string, extra ...string) []byte { return h.conf(ver, v4Ranges, extra...) }
	gcList := `"cni.dev/valid-attachments":[]`
	for _, tc := range []struct {
		name    string
		command string
		change  func(a *skel.CmdArgs)
		stdin   []byte
		want    uint
	}{
		{"ADD", "ADD", nil, conf("1.1.0"), 0},
		{"ADD: container ID a/b", "ADD", func(a *skel.CmdArgs) { a.ContainerID = "a/b" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: container ID ../x", "ADD", func(a *skel.CmdArgs) { a.ContainerID = "../x" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: no container ID", "ADD", func(a *skel.CmdArgs) { a.ContainerID = "" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: container ID of 254 bytes", "ADD", func(a *skel.CmdArgs) { a.ContainerID = strings.Repeat("c", 254) }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: interface a/b", "ADD", func(a *skel.CmdArgs) { a.IfName = "a/b" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: interface of 16 bytes", "ADD", func(a *skel.CmdArgs) { a.IfName = strings.Repeat("e", 16) }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: interface ..", "ADD", func(a *skel.CmdArgs) { a.IfName = ".." }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: no interface", "ADD", func(a *skel.CmdArgs) { a.IfName = "" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: no netns", "ADD", func(a *skel.CmdArgs) { a.Netns = "" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: netns a regular file", "ADD", func(a *skel.CmdArgs) { a.Netns = file }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: no CNI_PATH", "ADD", func(a *skel.CmdArgs) { a.Path = "" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: CNI_ARGS not KEY=VALUE", "ADD", func(a *skel.CmdArgs) { a.Args = "K8S_POD_NAME" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: CNI_ARGS IP unreadable", "ADD", func(a *skel.CmdArgs) { a.Args = "IP=10.20.0.300" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"ADD: config not JSON", "ADD", nil, []byte("{"), types.ErrDecodingFailure},
		{"ADD: no network name", "ADD", nil, []byte(strings.Replace(string(conf("1.1.0")), `"name":"net1"`, `"name":""`, 1)), types.ErrInvalidNetworkConfig},
		{"ADD: network name a/b", "ADD", nil, []byte(strings.Replace(string(conf("1.1.0")), `"name":"net1"`, `"name":"a/b"`, 1)), types.ErrInvalidNetworkConfig},
		{"ADD: cniVersion 9.9.9", "ADD", nil, conf("9.9.9"), types.ErrIncompatibleCNIVersion},
		{"ADD: invalid range", "ADD", nil, h.conf("1.1.0", `"ranges":[[{"subnet":"10.20.0.300/24"}]]`), types.ErrInvalidNetworkConfig},
		{"DEL", "DEL", func(a *skel.CmdArgs) { a.Netns = "" }, conf("1.1.0"), 0},
		{"DEL: container ID a/b", "DEL", func(a *skel.CmdArgs) { a.ContainerID = "a/b" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"DEL: interface a:b", "DEL", func(a *skel.CmdArgs) { a.IfName = "a:b" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"CHECK: cniVersion 0.3.1", "CHECK", nil, conf("0.3.1"), types.ErrIncompatibleCNIVersion},
		{"CHECK: no netns", "CHECK", func(a *skel.CmdArgs) { a.Netns = "" }, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"GC", "GC", func(a *skel.CmdArgs) { *a = skel.CmdArgs{Path: a.Path} }, conf("1.1.0", gcList), 0},
		{"GC: cniVersion 1.0.0", "GC", func(a *skel.CmdArgs) { *a = skel.CmdArgs{Path: a.Path} }, conf("1.0.0", gcList), types.ErrIncompatibleCNIVersion},
		{"GC: no list of valid attachments", "GC", func(a *skel.CmdArgs) { *a = skel.CmdArgs{Path: a.Path} }, conf("1.1.0"), types.ErrInvalidNetworkConfig},
		{"STATUS", "STATUS", func(a *skel.CmdArgs) { *a = skel.CmdArgs{Path: a.Path} }, conf("1.1.0"), 0},
		{"STATUS: cniVersion 0.4.0", "STATUS", func(a *skel.CmdArgs) { *a = skel.CmdArgs{Path: a.Path} }, conf("0.4.0"), types.ErrIncompatibleCNIVersion},
		{"STATUS: invalid range", "STATUS", func(a *skel.CmdArgs) { *a = skel.CmdArgs{Path: a.Path} },
			h.conf("1.1.0", `"ranges":[[{"subnet":"10.20.0.300/24"}]]`), types.ErrInvalidNetworkConfig},
		{"unknown command", "FOO", nil, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
		{"no command", "", nil, conf("1.1.0"), types.ErrInvalidEnvironmentVariables},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := h.args("c1", tc.stdin)
			if tc.change != nil {
				tc.change(args)
			}
			args.StdinData = tc.stdin
			var got uint
			conf, e := Validate(tc.command, args)
			if e != nil {
				got = e.Code
			} else if conf == nil {
				t.Fatal("Validate accepted the input but returned no config")
			}
			if plugin := h.skelCode(t, tc.command, args); got != plugin || got != tc.want {
				t.Fatalf("Validate answered %d (%v), the plugin %d; want %d", got, e, plugin, tc.want)
			}
		})
	}
}
