package importer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// comparePools compares the stored pools with the imported ones: a pool of
// the same name, CIDR and block size is present; the same name otherwise,
// or another name overlapping, is a conflict.
func comparePools(stored, imported []ipam.Pool) (present map[string]bool, conflicts []string) {
	present = map[string]bool{}
	for _, p := range imported {
		for _, q := range stored {
			switch {
			case q.Name == p.Name && q.CIDR == p.CIDR && q.BlockSize == p.BlockSize:
				present[p.Name] = true
			case q.Name == p.Name:
				conflicts = append(conflicts, fmt.Sprintf("pool %s exists as %s with /%d blocks; the import needs %s with /%d blocks", p.Name, q.CIDR, q.BlockSize, p.CIDR, p.BlockSize))
			case q.CIDR.Overlaps(p.CIDR):
				conflicts = append(conflicts, fmt.Sprintf("pool %s (%s) overlaps the imported pool %s (%s): both could hand out the same address", q.Name, q.CIDR, p.Name, p.CIDR))
			}
		}
	}
	return present, conflicts
}

func sameIPs(a, b []ipam.HandleIP) bool {
	key := func(ips []ipam.HandleIP) []string {
		var out []string
		for _, ip := range ips {
			out = append(out, ip.Pool+" "+ip.Addr.String())
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

func ipList(ips []ipam.HandleIP) string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.Addr.String())
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func conflictError(msgs []string) error {
	const show = 20
	s := strings.Join(msgs[:min(len(msgs), show)], "; ")
	if len(msgs) > show {
		s += fmt.Sprintf("; and %d more", len(msgs)-show)
	}
	return fmt.Errorf("%w: %s", ErrConflict, s)
}
