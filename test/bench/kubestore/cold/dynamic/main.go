// Command dynamic is the cold-start measurement's client-go dynamic
// client: config from a kubeconfig, one GET of a prototype object.
//
//	dynamic KUBECONFIG NAME
package main

import (
	"context"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gvr := schema.GroupVersionResource{Group: "ipkeeper.io", Version: "v1alpha1", Resource: "protoblocks"}
	u, err := dc.Resource(gvr).Get(context.Background(), os.Args[2], metav1.GetOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(u.GetResourceVersion())
}
