package agenttest

import "os"

// Signal sends sig to the agent by its PID (SIGSTOP and SIGCONT to stop
// it in place and let it go on).
func (p *Process) Signal(sig os.Signal) error {
	return p.cmd.Process.Signal(sig)
}
