// Command addproc is test/storage's stand-in for a plugin process on the
// typed store: it opens one backend, allocates dual-stack addresses for
// containers of one node with a fresh Allocator each (as each plugin
// exec is), and prints "ok <handle ID>" after each ADD returned — the
// moment a runtime would have its result. The kill -9 test kills it at
// random points. Not a product binary.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/config"
	"github.com/ipkeeper/ipkeeper/internal/datastore"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

func main() {
	backend := flag.String("backend", "", "local, etcd or kubernetes")
	path := flag.String("path", "", "local: the store directory")
	endpoint := flag.String("endpoint", "", "etcd: the client URL")
	prefix := flag.String("prefix", "", "etcd key prefix or Kubernetes partition")
	kubeconfig := flag.String("kubeconfig", "", "kubernetes: a kubeconfig")
	node := flag.String("node", "", "the node")
	tag := flag.String("tag", "", "container ID prefix")
	count := flag.Int("count", 1000, "ADDs to make")
	v4, v6 := flag.String("v4", "", "IPv4 pool"), flag.String("v6", "", "IPv6 pool")
	flag.Parse()
	ctx := context.Background()
	var s store.Store
	var err error
	switch *backend {
	case "local":
		s, err = datastore.Open(ctx, config.Datastore{Type: config.DatastoreLocal, Path: *path}, datastore.Options{})
	case "etcd":
		s, err = datastore.Open(ctx, config.Datastore{Type: config.DatastoreEtcd, Endpoints: []string{*endpoint}, Prefix: *prefix}, datastore.Options{})
	case "kubernetes":
		s, err = kube.Open(kube.Config{Kubeconfig: *kubeconfig, Prefix: *prefix, QPS: 1000, Burst: 1000})
	default:
		err = fmt.Errorf("unknown backend %q", *backend)
	}
	if err != nil {
		log.Fatal(err)
	}
	for i := range *count {
		c := fmt.Sprintf("%s-%d", *tag, i)
		h := ipam.Handle{ID: ipam.HandleID("k8s", c, "eth0"), Network: "k8s", ContainerID: c, IfName: "eth0", Node: *node}
		if _, err := allocator.New(s, nil).Allocate(ctx, allocator.Request{Handle: h, Sets: [][]string{{*v4}, {*v6}}}); err != nil {
			log.Fatal(err)
		}
		if _, err := fmt.Fprintln(os.Stdout, "ok", h.ID); err != nil {
			log.Fatal(err)
		}
	}
}
