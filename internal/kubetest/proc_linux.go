package kubetest

import "syscall"

// childAttr makes the API server die with the test process (SIGKILL on
// the parent's death), so a test binary killed by a timeout leaves no
// kube-apiserver behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
