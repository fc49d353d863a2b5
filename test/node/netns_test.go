package node

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// proxy forwards TCP connections from a listener (possibly in the node's
// network namespace) to the API server on the host's loopback. Cut makes
// the API server unreachable through it (connections refused, open ones
// closed) until Restore.
type proxy struct {
	target string
	mu     sync.Mutex
	ln     net.Listener
	listen func() (net.Listener, error)
	conns  map[net.Conn]struct{}
	cut    bool
}

// newProxy listens at addr — inside the network namespace at nsPath, or
// on the host when nsPath is "" — and forwards to target until the test
// ends.
func newProxy(t *testing.T, nsPath, addr, target string) *proxy {
	t.Helper()
	p := &proxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := listenIn(nsPath, addr)
	if err != nil {
		t.Fatalf("proxy listen %s in %q: %v", addr, nsPath, err)
	}
	p.ln = ln
	// Restore listens on the port picked now.
	bound := ln.Addr().String()
	p.listen = func() (net.Listener, error) { return listenIn(nsPath, bound) }
	go p.serve(ln)
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.closeLocked()
	})
	return p
}

// Addr is the address the proxy listens on.
func (p *proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ln.Addr().String()
}

func (p *proxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *proxy) forward(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, up)
		p.mu.Unlock()
		up.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// Cut closes the listener and every open connection: clients get
// "connection refused" until Restore.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.closeLocked()
}

func (p *proxy) closeLocked() {
	if p.ln != nil {
		p.ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
}

// Restore listens again on the same address.
func (p *proxy) Restore(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	ln, err := p.listen()
	if err != nil {
		t.Fatalf("proxy listen again: %v", err)
	}
	p.ln, p.cut = ln, false
	go p.serve(ln)
}

// listenIn listens on addr inside the network namespace at nsPath ("" is
// the test's own). The socket keeps its namespace. The thread that
// enters the namespace goes back to its own before it is unlocked: a
// thread that ends takes with it the children it started with a parent
// death signal (kubetest's API server, when it was started from that
// thread). Only when it cannot go back does it stay locked, and the Go
// runtime ends it instead of reusing it elsewhere.
func listenIn(nsPath, addr string) (net.Listener, error) {
	if nsPath == "" {
		return net.Listen("tcp", addr)
	}
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ln, back, err := listenInLocked(nsPath, addr)
		if back {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

// listenInLocked is listenIn on a locked thread; back says whether the
// thread is in its own network namespace again.
func listenInLocked(nsPath, addr string) (ln net.Listener, back bool, err error) {
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, true, err
	}
	defer own.Close()
	f, err := os.Open(nsPath)
	if err != nil {
		return nil, true, err
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, errors.Join(errors.New("setns"), err)
	}
	ln, err = net.Listen("tcp", addr)
	if rerr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); rerr != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, false, errors.Join(errors.New("setns back"), rerr)
	}
	return ln, true, err
}
