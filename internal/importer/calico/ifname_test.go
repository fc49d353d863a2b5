package calico

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckIfName: the interface name completing Calico's handle IDs must
// be one a runtime can send as CNI_IFNAME, or no CNI DEL ever matches the
// imported handles.
func TestCheckIfName(t *testing.T) {
	for _, ok := range []string{"eth0", "net1", "eth0.100", "a", "abcdefghijklmno", "veth-x_1"} {
		if err := CheckIfName(ok); err != nil {
			t.Errorf("CheckIfName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "eth0/1", "/", "a:b", "eth 0", "eth0\n", "\t", ".", "..", "abcdefghijklmnop"} {
		if err := CheckIfName(bad); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("CheckIfName(%q) = %v, want ErrInvalidOption", bad, err)
		}
	}
}

// TestPlanRefusesBadIfName: Plan refuses an interface name no DEL can
// send, naming the option, before it builds anything.
func TestPlanRefusesBadIfName(t *testing.T) {
	kvs, err := ParseFile(readReal(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"eth0/1", "net 1", ".."} {
		plan, err := Plan(kvs, Options{IfName: bad})
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "ifname") || plan != nil {
			t.Errorf("Plan with IfName %q = %v, %v; want ErrInvalidOption naming ifname", bad, plan, err)
		}
	}
}
