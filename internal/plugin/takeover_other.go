//go:build !linux

package plugin

// netnsGone cannot prove a network namespace gone off Linux: nothing is
// ever taken over there.
func netnsGone(path string) (bool, string) {
	return false, "network namespaces are only examined on Linux"
}
