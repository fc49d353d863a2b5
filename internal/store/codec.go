package store

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// MarshalPool validates a pool and returns its stored form (ipam.Pool's
// JSON, as the first storage layout wrote it), or an error wrapping
// ErrInvalid.
func MarshalPool(p Pool) ([]byte, error) {
	if err := ValidName("pool", p.Spec.Name); err != nil {
		return nil, err
	}
	if err := p.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return json.Marshal(p.Spec)
}

// UnmarshalPool decodes a stored pool; name is the name it is stored
// under, which the pool must carry.
func UnmarshalPool(name string, data []byte) (Pool, error) {
	var p Pool
	if err := json.Unmarshal(data, &p.Spec); err != nil {
		return Pool{}, fmt.Errorf("%w: pool %q: %v", ErrCorrupt, name, err)
	}
	if p.Spec.Name != name {
		return Pool{}, fmt.Errorf("%w: pool %q is stored as %q", ErrCorrupt, p.Spec.Name, name)
	}
	return p, nil
}

// ClaimSpec is the stored form of a claim.
type ClaimSpec struct {
	Pool string       `json:"pool"`
	CIDR netip.Prefix `json:"cidr"`
	Node string       `json:"node"`
}

// EncodeClaim validates a claim and returns its stored form, or an error
// wrapping ErrInvalid.
func EncodeClaim(c Claim) (ClaimSpec, error) {
	if err := ValidName("pool", c.Pool); err != nil {
		return ClaimSpec{}, err
	}
	if err := ValidName("node", c.Node); err != nil {
		return ClaimSpec{}, err
	}
	if !c.CIDR.IsValid() || c.CIDR != c.CIDR.Masked() {
		return ClaimSpec{}, fmt.Errorf("%w: claim of pool %q: block %s is not a masked prefix", ErrInvalid, c.Pool, c.CIDR)
	}
	if c.CIDR.Addr().BitLen()-c.CIDR.Bits() > ipam.MaxBlockHostBits {
		return ClaimSpec{}, fmt.Errorf("%w: claim of pool %q: block %s holds more than 2^%d addresses", ErrInvalid, c.Pool, c.CIDR, ipam.MaxBlockHostBits)
	}
	return ClaimSpec{Pool: c.Pool, CIDR: c.CIDR, Node: c.Node}, nil
}

// DecodeClaim checks a stored claim against the block it is stored as.
func DecodeClaim(ref BlockRef, spec ClaimSpec) (Claim, error) {
	c := Claim{BlockRef: BlockRef{spec.Pool, spec.CIDR}, Node: spec.Node}
	if c.BlockRef != ref {
		return Claim{}, fmt.Errorf("%w: claim of block %s is stored as %s", ErrCorrupt, c.BlockRef, ref)
	}
	if _, err := EncodeClaim(c); err != nil {
		return Claim{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return c, nil
}
