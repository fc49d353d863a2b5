package calico

import (
	"errors"
	"strings"
	"testing"

	"github.com/ipkeeper/ipkeeper/internal/importer"
)

// TestParseFileDeep: etcdctl output nesting deeper than the importer's
// limit is refused before it is decoded, with the limit's error.
func TestParseFileDeep(t *testing.T) {
	deep := "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26\n" + strings.Repeat(`{"a":[`, 5000) + strings.Repeat("]}", 5000) + "\n"
	if _, err := ParseFile([]byte(deep)); !errors.Is(err, importer.ErrSourceLimit) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("ParseFile of a value nested 10 000 deep: %v, want ErrSourceLimit naming line 2", err)
	}
}
