// Command clientset is the client-go side of the cold-start measurement:
// it builds a clientset from a kubeconfig and GETs one prototype object,
// as a plugin process talking to the API directly would on every exec.
//
//	clientset KUBECONFIG NAME
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/ipkeeper.io/v1alpha1/protoblocks", os.Args[2]).DoRaw(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(len(raw))
}
