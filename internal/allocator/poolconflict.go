package allocator

import (
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// describe spells a pool's definition for the ErrPoolConflict message of
// a config that defines a stored pool otherwise.
func describe(p ipam.Pool) string {
	s := fmt.Sprintf("%s blocks /%d", p.CIDR, p.BlockSize)
	if p.RangeStart.IsValid() || p.RangeEnd.IsValid() {
		s += fmt.Sprintf(" range %v-%v", p.RangeStart, p.RangeEnd)
	}
	if p.Gateway.IsValid() {
		s += " gateway " + p.Gateway.String()
	}
	if len(p.Exclude) > 0 {
		s += fmt.Sprintf(" exclude %v", p.Exclude)
	}
	return s
}
