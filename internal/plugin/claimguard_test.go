package plugin

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipkeeper/ipkeeper/internal/allocator/allocatortest"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// TestADDRefusesForgedBlock: node-a's object rewritten with node-b's
// block in it (node-b's held address first in its free queue) makes
// node-a's ADD fail with code 999 naming the block and node-b, and
// nothing is allocated.
func TestADDRefusesForgedBlock(t *testing.T) {
	h := newHarness(t)
	confA := h.conf("1.0.0", `"ranges":[[{"subnet":"10.21.0.0/24"}]]`)
	confB := bytes.Replace(confA, []byte(`"node-a"`), []byte(`"node-b"`), 1)
	for _, c := range []struct {
		container string
		conf      []byte
	}{{"b0", confB}, {"b1", confB}, {"a0", confA}} {
		if _, err := h.add(c.container, c.conf); err != nil {
			t.Fatal(err)
		}
	}
	s, err := datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreLocal, Path: h.dir}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := s.ListClaims(t.Context(), store.ClaimSelector{Node: "node-b"})
	if err != nil || len(claims) != 1 {
		t.Fatalf("node-b's claims: %+v, %v", claims, err)
	}
	forged, stolen := allocatortest.Steal(t, s, "node-a", "node-b", claims[0].BlockRef)
	_ = s.Close()

	res, err := h.add("a1", confA)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrInternal || !strings.Contains(te.Msg, claims[0].BlockRef.String()) || !strings.Contains(te.Msg, `"node-b"`) {
		t.Fatalf("ADD on the forged object = %v, %v; want code %d naming %s and node-b (node-b's %s is the stolen address)",
			res, err, types.ErrInternal, claims[0].BlockRef, stolen)
	}
	s, err = datastore.Open(t.Context(), config.Datastore{Type: config.DatastoreLocal, Path: h.dir}, datastore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.GetNode(t.Context(), "node-a"); err != nil || n.Version != forged.Version {
		t.Fatalf("node-a's object after the refused ADD: %+v, %v; want it unchanged", n, err)
	}
}
