package config

import (
	"encoding/json"
	"fmt"
	"os"
)

// IPAMType is the ipam "type" that names this plugin.
const IPAMType = "ipkeeper"

// LoadFile reads a CNI config file for the admin tools: a single network
// config (.conf/.json), or a config list (.conflist, recognised by its
// "plugins" key) of which the first plugin with ipam type "ipkeeper" is used,
// with the list's "name" and "cniVersion". Parse errors wrap ErrInvalid; a
// file that cannot be read returns the os error.
func LoadFile(path string) (*IPAM, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read network config: %w", err)
	}
	return loadBytes(data, path, osEnvironment())
}

// loadBytes is LoadFile on data read from path.
func loadBytes(data []byte, path string, env environment) (*IPAM, error) {
	var top map[string]json.RawMessage
	if err := unmarshalDocument(data, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	plugins, ok := top["plugins"]
	if !ok {
		if err := checkIPAMType(top, "ipam.type"); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ipam, err := parse(data, env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return ipam, nil
	}
	l, err := list(plugins, "plugins")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, el := range l {
		var plugin map[string]json.RawMessage
		if kindOf(el) != "an object" || json.Unmarshal(el, &plugin) != nil {
			return nil, fmt.Errorf("%s: %w", path, wrongType(fmt.Sprintf("plugins[%d]", i), "an object", el))
		}
		if checkIPAMType(plugin, "") != nil {
			continue
		}
		// As libcni does, the list's name and cniVersion apply to each plugin.
		for _, k := range []string{"name", "cniVersion"} {
			if v, ok := top[k]; ok {
				plugin[k] = v
			} else {
				delete(plugin, k)
			}
		}
		netconf, err := json.Marshal(plugin)
		if err != nil {
			return nil, fmt.Errorf("%s: plugins[%d]: %w", path, i, err)
		}
		ipam, err := parse(netconf, env)
		if err != nil {
			return nil, fmt.Errorf("%s: plugins[%d]: %w", path, i, err)
		}
		return ipam, nil
	}
	return nil, fmt.Errorf("%s: %w", path, invalid("plugins", "has no plugin with ipam type %q", IPAMType))
}

// checkIPAMType checks that conf's ipam.type is IPAMType.
func checkIPAMType(conf map[string]json.RawMessage, key string) error {
	var ipam struct {
		Type json.RawMessage `json:"type"`
	}
	if raw, ok := conf["ipam"]; !ok || object(raw, "ipam", &ipam) != nil || !present(ipam.Type) {
		return invalid(key, "is missing: the config does not use ipam type %q", IPAMType)
	}
	t, err := str(ipam.Type, key)
	if err != nil {
		return err
	}
	if t != IPAMType {
		return invalid(key, "%s is not %q", quote(t), IPAMType)
	}
	return nil
}
