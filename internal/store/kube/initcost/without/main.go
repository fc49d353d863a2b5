// Command without is ../with without internal/store/kube: the baseline of
// the package-init comparison.
package main

import "github.com/ipkeeper/ipkeeper/internal/store"

var _ store.Limits

func main() {}
