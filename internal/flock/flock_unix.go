//go:build unix

// Package flock takes exclusive file locks that wait without polling.
package flock

import (
	"context"
	"errors"
	"os"
	"syscall"
)

// Lock takes an exclusive flock on f, blocking until the holder releases
// it or ctx ends. A blocked flock is woken by the kernel as soon as the
// lock is free, so waiting processes take turns without polling gaps. A
// process that dies releases its lock with its file descriptor.
//
// On error f is closed (possibly later: when ctx ends first, a goroutine
// keeps waiting and closes f, dropping the lock, once its flock returns).
// The error is context.Cause(ctx) when ctx ended first, else a
// *os.PathError from flock.
func Lock(ctx context.Context, f *os.File) error {
	fd := int(f.Fd())
	err := flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		_ = f.Close()
		return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	done := make(chan error, 1)
	go func() { done <- flock(fd, syscall.LOCK_EX) }()
	select {
	case err := <-done:
		if err != nil {
			_ = f.Close()
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
		return nil
	case <-ctx.Done():
		go func() {
			<-done
			_ = f.Close()
		}()
		return context.Cause(ctx)
	}
}

func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
