package agenttest

import "syscall"

// childAttr makes the agent die with the test process.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
