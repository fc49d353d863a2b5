package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"time"
)

// errSetup means Calico's datastore could not be prepared.
var errSetup = errors.New("calico setup")

// setupCalico has calicoside (test/bench/calico/side) create, through
// Calico's own library, what calico-node and an operator would have made
// before the first pod: the IP pool and the node's Node resource (Calico's
// IPAM refuses a node it has no Node resource for). It asks for no ADD.
func setupCalico(side, endpoint string) error {
	cmd := exec.Command(side)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: start %s: %w", errSetup, side, err)
	}
	defer func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for _, req := range []map[string]any{
		{"op": "setup", "endpoints": endpoint, "cidr": poolCIDR, "blockSize": blockSize},
		// No ADD: the side creates the Node resources of the nodes named
		// before it runs any.
		{"op": "add", "nodes": []string{node}, "conc": 1, "n": 0},
	} {
		line, err := json.Marshal(req)
		if err != nil {
			return err
		}
		if _, err := in.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("%w: write: %w", errSetup, err)
		}
		if !sc.Scan() {
			return fmt.Errorf("%w: no answer to %s: %v", errSetup, line, sc.Err())
		}
		var a struct {
			Errors   int    `json:"errors"`
			FirstErr string `json:"firstErr"`
		}
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			return fmt.Errorf("%w: answer %.200q: %w", errSetup, sc.Bytes(), err)
		}
		if a.Errors > 0 || a.FirstErr != "" {
			return fmt.Errorf("%w: %s: %s", errSetup, req["op"], a.FirstErr)
		}
	}
	return nil
}

// calicoRunDir is where calico-ipam marks, at a fixed path, that it has
// upgraded the node's IPAM data (ipam_upgraded under cni/).
const calicoRunDir = "/var/run/calico"

// calicoMarkCleanup returns the function that removes calicoRunDir after
// the run if it did not exist before (calico-ipam creates it on its first
// ADD), and leaves it alone otherwise.
func calicoMarkCleanup() func() {
	if _, err := os.Lstat(calicoRunDir); !errors.Is(err, fs.ErrNotExist) {
		return func() {}
	}
	return func() { _ = os.RemoveAll(calicoRunDir) }
}
