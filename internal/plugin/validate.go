package plugin

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// verbInput tells which CNI_* variables a verb requires. CNI_PATH is
// required by every verb.
type verbInput struct {
	containerID, netns, ifName bool
	// minVersion is the lowest cniVersion of a config the verb takes.
	minVersion string
}

// verbInputs are the verbs Validate knows, with what skel requires of
// each.
var verbInputs = map[string]verbInput{
	"ADD":    {containerID: true, netns: true, ifName: true},
	"DEL":    {containerID: true, ifName: true},
	"CHECK":  {containerID: true, netns: true, ifName: true, minVersion: "0.4.0"},
	"GC":     {minVersion: "1.1.0"},
	"STATUS": {minVersion: "1.1.0"},
}

// Validate checks one verb's input as the plugin does before the verb
// reads a datastore or the Kubernetes API, in the plugin's order, and
// returns the parsed config or the CNI error the plugin would print. The
// first checks are those skel makes before it calls a verb: the CNI_*
// variables the verb requires, the form of CNI_CONTAINERID and
// CNI_IFNAME, the network name, and a cniVersion the plugin and the verb
// take. Then come the verb's own: CNI_CONTAINERID's length, CNI_ARGS and
// the requested addresses, and CNI_NETNS (unless overridden) for ADD; the
// list of valid attachments for GC; the whole config (config.Parse) for
// every verb. Any other command (VERSION included) fails.
//
// In the plugin process skel and the verbs make these checks;
// ipkeeper-agent runs Validate on every verb handed to it, so that a
// request that did not come from a plugin gets the answer the plugin
// would have given.
func Validate(command string, args *skel.CmdArgs) (*config.IPAM, *types.Error) {
	in, known := verbInputs[command]
	if e := checkVariables(command, in, known, args); e != nil {
		return nil, e
	}
	if e := checkNetworkName(args.StdinData); e != nil {
		return nil, e
	}
	if !known {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("unknown CNI_COMMAND: %v", command), "")
	}
	if e := checkVersion(command, in.minVersion, args.StdinData); e != nil {
		return nil, e
	}
	switch command {
	case "ADD":
		if _, err := parseArgs(args.ContainerID, args.Args, args.StdinData); err != nil {
			return nil, cniError(err)
		}
		if o := strings.ToUpper(args.NetnsOverride); o != "TRUE" && o != "1" {
			if err := checkNetNS(args.Netns); err != nil {
				return nil, cniError(err)
			}
		}
	case "GC":
		if _, err := config.GCAttachments(args.StdinData); err != nil {
			return nil, cniError(err)
		}
	}
	conf, err := parseConfig(args.StdinData)
	if err != nil {
		return nil, VerbError(command, err)
	}
	return conf, nil
}

// VerbError is the CNI error the plugin prints when the verb command
// fails with err (nil for nil), by the plugin's mapping of every layer's
// errors to CNI codes (STATUS reports "cannot serve ADD now" as 50).
func VerbError(command string, err error) *types.Error {
	switch {
	case err == nil:
		return nil
	case command == "STATUS":
		return statusError(err)
	default:
		return cniError(err)
	}
}

// checkVariables checks the CNI_* variables as skel does: a malformed
// CNI_CONTAINERID or CNI_IFNAME fails at once, then the missing ones are
// named together.
func checkVariables(command string, in verbInput, known bool, args *skel.CmdArgs) *types.Error {
	var missing []string
	if command == "" {
		missing = append(missing, "CNI_COMMAND")
	}
	for _, v := range []struct {
		name     string
		value    string
		required bool
		check    func(string) *types.Error
	}{
		{"CNI_CONTAINERID", args.ContainerID, in.containerID, utils.ValidateContainerID},
		{"CNI_NETNS", args.Netns, in.netns, nil},
		{"CNI_IFNAME", args.IfName, in.ifName, utils.ValidateInterfaceName},
		{"CNI_PATH", args.Path, known, nil},
	} {
		switch {
		case v.value == "" && v.required:
			missing = append(missing, v.name)
		case v.value != "" && v.required && v.check != nil:
			if e := v.check(v.value); e != nil {
				return e
			}
		}
	}
	if len(missing) > 0 {
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("required env variables [%s] missing", strings.Join(missing, ",")), "")
	}
	return nil
}

// checkNetworkName checks that the config is JSON with a legal network
// name.
func checkNetworkName(stdin []byte) *types.Error {
	var conf struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("error unmarshall network config: %v", err), "")
	}
	if conf.Name == "" {
		return types.NewError(types.ErrInvalidNetworkConfig, "missing network name", "")
	}
	return utils.ValidateNetworkName(conf.Name)
}

// checkVersion checks that the config's cniVersion is one the plugin
// speaks and, for a verb with a minimum version, at least that.
func checkVersion(command, minVersion string, stdin []byte) *types.Error {
	confVersion, err := (&version.ConfigDecoder{}).Decode(stdin)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	if minVersion != "" {
		ok, err := version.GreaterThanOrEqualTo(confVersion, minVersion)
		if err != nil {
			return types.NewError(types.ErrDecodingFailure, err.Error(), "")
		}
		if !ok {
			return types.NewError(types.ErrIncompatibleCNIVersion, "config version does not allow "+command, "")
		}
		ok = false
		for _, v := range Versions.SupportedVersions() {
			if ge, err := version.GreaterThanOrEqualTo(v, confVersion); err != nil {
				return types.NewError(types.ErrDecodingFailure, err.Error(), "")
			} else if ge {
				ok = true
				break
			}
		}
		if !ok {
			return types.NewError(types.ErrIncompatibleCNIVersion, "plugin version does not allow "+command, "")
		}
	}
	if e := (&version.Reconciler{}).Check(confVersion, Versions); e != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, "incompatible CNI versions", e.Details())
	}
	return nil
}
