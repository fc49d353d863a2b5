// Command ipkeeper is the ipkeeper CNI IPAM plugin.
package main

import "github.com/ipkeeper/ipkeeper/internal/plugin"

func main() { plugin.Main("ipkeeper CNI IPAM plugin") }
