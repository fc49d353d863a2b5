//go:build unix

package local

import (
	"context"
	"errors"
	"os"
	"syscall"
)

// waitLock takes an exclusive flock on f, blocking until the holder
// releases it or ctx ends. A blocked flock is woken by the kernel as soon
// as the lock is free, so waiting processes take turns without bbolt's
// 50 ms polling gaps. On error f is closed (possibly later: when ctx ends
// first, a goroutine keeps waiting and closes f, dropping the lock, once
// its flock returns).
func waitLock(ctx context.Context, f *os.File) error {
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
