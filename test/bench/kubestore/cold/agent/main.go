// Command agent is the cold-start measurement's per-node-agent client: it
// asks the bench's agent (a unix socket served by a process that keeps its
// client-go connection warm) for one prototype object.
//
//	agent SOCKET NAME
package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	c, err := net.Dial("unix", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	if _, err := fmt.Fprintln(c, os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	raw, err := io.ReadAll(c)
	if err != nil || len(raw) == 0 {
		fmt.Fprintln(os.Stderr, "agent answered nothing", err)
		os.Exit(1)
	}
	fmt.Println(len(raw))
}
