package config_test

import (
	"fmt"

	"github.com/ipkeeper/ipkeeper/internal/config"
)

// A host-local network config with the ipam type swapped for "ipkeeper".
func ExampleParse() {
	netconf := []byte(`{
	  "cniVersion": "1.0.0",
	  "name": "podnet",
	  "type": "bridge",
	  "ipam": {
	    "type": "ipkeeper",
	    "nodeName": "node-a",
	    "ranges": [
	      [{"subnet": "10.22.0.0/16", "rangeStart": "10.22.0.10", "rangeEnd": "10.22.255.200"}],
	      [{"subnet": "fd00:22::/64"}]
	    ],
	    "blockSize": 26,
	    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
	    "exclude": ["10.22.7.0/24"]
	  }
	}`)
	c, err := config.Parse(netconf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Network, c.NodeName, c.Syntax, c.Datastore.Type, c.Datastore.Path)
	for i, set := range c.RangeSets {
		for _, r := range set {
			first, last := r.Bounds()
			fmt.Printf("set %d: %s %s-%s gateway %s exclude %v\n", i, r.Subnet, first, last, r.Gateway, r.Exclude)
		}
	}

	_, err = config.Parse([]byte(`{"name": "podnet", "ipam": {"type": "ipkeeper",
	  "ranges": [[{"subnet": "10.1.0.0/16"}, {"subnet": "10.2.0.0/16", "rangeStart": "10.3.0.5"}]]}}`))
	fmt.Println(err)
	// Output:
	// podnet node-a native local /var/lib/cni/ipkeeper
	// set 0: 10.22.0.0/16 10.22.0.10-10.22.255.200 gateway 10.22.0.1 exclude [10.22.7.0/24]
	// set 1: fd00:22::/64 fd00:22::-fd00:22::ffff:ffff:ffff:ffff gateway fd00:22::1 exclude []
	// ipam.ranges[0][1].rangeStart "10.3.0.5" is outside subnet 10.2.0.0/16
}
