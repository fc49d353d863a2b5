package config

import (
	"encoding/json"
	"unicode"
	"unicode/utf8"
)

// Input limits. A network config comes from the container runtime and is
// parsed by a short-lived root process under a deadline, so every list has a
// bound far above what a real config holds, and parsing stays linear or
// n·log n in the input below those bounds.
const (
	// MaxConfigBytes bounds the whole network config (stdin).
	MaxConfigBytes = 1 << 20
	// MaxRangeSets bounds the range sets of a config: each is one address
	// of every ADD, committed in one transaction.
	MaxRangeSets = 16
	// MaxRanges bounds the ranges of all range sets together.
	MaxRanges = 256
	// MaxExcludes bounds the exclude entries of a config (ipam.exclude and
	// every ipRanges[i].exclude together).
	MaxExcludes = 1024
	// MaxRoutes bounds ipam.routes.
	MaxRoutes = 1024
	// MaxPools bounds ipam.pools.
	MaxPools = 256
	// MaxDNSEntries bounds each list of ipam.dns.
	MaxDNSEntries = 64
	// MaxAttachments bounds a GC's list of valid attachments.
	MaxAttachments = 65536
)

// Name limits, checked where the names enter (config and CNI environment).
// 253 is the longest Kubernetes object name (a DNS subdomain), which Node
// and NetworkAttachmentDefinition names are; keys built from these names
// stay far below bbolt's 32 KiB key limit and etcd's request size. A
// Kubernetes label value (63) holds none of them in general, so a
// Kubernetes datastore has to hash them there.
const (
	// MaxNameLength bounds network names, node names, pool names and
	// whereabouts network_name.
	MaxNameLength = 253
	// MaxContainerIDLength bounds CNI_CONTAINERID (CRI IDs are 64).
	MaxContainerIDLength = 253
	// MaxIfNameLength bounds interface names (Linux IFNAMSIZ - 1).
	MaxIfNameLength = 15
	// MaxPathLength bounds file and directory paths (Linux PATH_MAX - 1).
	MaxPathLength = 4095
)

// checkSize rejects a document larger than MaxConfigBytes.
func checkSize(data []byte) error {
	if len(data) > MaxConfigBytes {
		return invalid("", "network config is %d bytes, more than the limit of %d bytes (%d MiB)",
			len(data), MaxConfigBytes, MaxConfigBytes>>20)
	}
	return nil
}

// boundedList decodes a JSON array of at most limit elements; what names
// them in the error.
func boundedList(raw json.RawMessage, key string, limit int, what string) ([]json.RawMessage, error) {
	l, err := list(raw, key)
	if err != nil {
		return nil, err
	}
	if len(l) > limit {
		return nil, tooMany(key, len(l), limit, what)
	}
	return l, nil
}

// tooMany reports that key holds n things, more than limit.
func tooMany(key string, n, limit int, what string) error {
	return invalid(key, "has %d %s, more than the limit of %d", n, what, limit)
}

// checkNameLength rejects a name longer than limit bytes.
func checkNameLength(key, name string, limit int) error {
	if len(name) > limit {
		return invalid(key, "%s is %d bytes long, more than the limit of %d", quote(name), len(name), limit)
	}
	return nil
}

// CheckContainerID validates a container ID as the CNI spec defines it
// (a letter or digit, then letters, digits, '_', '.' or '-') and bounds
// its length by MaxContainerIDLength. key names its source in the error.
func CheckContainerID(key, id string) error {
	if id == "" {
		return invalid(key, "is empty")
	}
	if err := checkNameLength(key, id, MaxContainerIDLength); err != nil {
		return err
	}
	if !networkNameRE.MatchString(id) {
		return invalid(key, "%s is not a valid container ID (want a letter or digit, then letters, digits, '_', '.' or '-')", quote(id))
	}
	return nil
}

// CheckIfName validates an interface name as Linux and the CNI spec allow
// it: 1..MaxIfNameLength bytes, no '/', ':' or white space, not "." or "..".
func CheckIfName(key, name string) error {
	switch {
	case name == "":
		return invalid(key, "is empty")
	case len(name) > MaxIfNameLength:
		return invalid(key, "%s is %d bytes long, more than an interface name's %d", quote(name), len(name), MaxIfNameLength)
	case name == "." || name == "..":
		return invalid(key, "%s is not a valid interface name", quote(name))
	case !utf8.ValidString(name):
		return invalid(key, "%s is not valid UTF-8", quote(name))
	}
	for _, r := range name {
		if r == '/' || r == ':' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return invalid(key, "%s must not contain '/', ':', white space or control characters", quote(name))
		}
	}
	return nil
}
