// Command pause is the real-node tests' sandbox and container image
// process: it waits until it is signalled (SIGTERM, SIGINT) and exits 0.
// The tests build it statically and pack it as an OCI image, since no
// registry is reachable for the upstream pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
