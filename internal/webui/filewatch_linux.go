package webui

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"
)

// watchFile reports writes to the file at path (and its creation,
// replacement or removal) on the returned channel, coalesced, until ctx
// ends, using inotify on its directory. Only writes count (IN_MODIFY), not
// the close of a descriptor opened for writing, so the map's own reads of
// the store do not wake it. It returns nil when the directory cannot be
// watched (it does not exist yet, permissions); polling then suffices.
func watchFile(ctx context.Context, path string) <-chan struct{} {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	mask := uint32(syscall.IN_MODIFY | syscall.IN_CREATE | syscall.IN_MOVED_TO | syscall.IN_DELETE | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF)
	if _, err := syscall.InotifyAddWatch(fd, filepath.Dir(path), mask); err != nil {
		_ = syscall.Close(fd)
		return nil
	}
	// A non-blocking descriptor in os.File goes through the runtime's
	// poller: Read parks the goroutine and Close wakes it.
	f := os.NewFile(uintptr(fd), "inotify")
	name := filepath.Base(path)
	ch := make(chan struct{}, 1)
	go func() {
		<-ctx.Done()
		_ = f.Close()
	}()
	go func() {
		buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			hit := false
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				evName := string(nameBytes)
				for len(evName) > 0 && evName[len(evName)-1] == 0 {
					evName = evName[:len(evName)-1]
				}
				if evName == name || ev.Mask&(syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF|syscall.IN_Q_OVERFLOW) != 0 {
					hit = true
				}
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
			if hit {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch
}
