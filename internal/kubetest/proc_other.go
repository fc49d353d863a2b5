//go:build !linux

package kubetest

import "syscall"

// childAttr has nothing to add where there is no parent-death signal.
func childAttr() *syscall.SysProcAttr { return nil }
