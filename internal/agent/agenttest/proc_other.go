//go:build !linux

package agenttest

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
