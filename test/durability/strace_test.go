package durability

import (
	"strings"
	"testing"
)

const sample = `100 write(1</tmp/out>, "{\"cniVersion\":\"1.0.0\"}", 22) = 22
101 fdatasync(8</var/lib/ipkeeper/ipkeeper.db> <unfinished ...>
100 --- SIGURG {si_signo=SIGURG, si_code=SI_TKILL, si_pid=100, si_uid=0} ---
102 write(3<TCP:[127.0.0.1:40000->127.0.0.1:2379]>, "POST /v3/kv/txn HTTP/1.1\r\n", 26) = 26
101 <... fdatasync resumed>) = 0
102 read(3<TCP:[127.0.0.1:40000->127.0.0.1:2379]>, 0xc000, 4096) = -1 EAGAIN (Resource temporarily unavailable)
102 +++ exited with 0 +++
`

// ParseStrace reads calls, their descriptors' paths and return values, and
// places a call interrupted by another thread's line at its return.
func TestParseStrace(t *testing.T) {
	calls, err := ParseStrace(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, path, ret string
		fd, start, end  int
		ok              bool
	}{
		{"write", "/tmp/out", "22", 1, 0, 0, true},
		{"fdatasync", "/var/lib/ipkeeper/ipkeeper.db", "0", 8, 1, 4, true},
		{"write", "TCP:[127.0.0.1:40000->127.0.0.1:2379]", "26", 3, 3, 3, true},
		{"read", "TCP:[127.0.0.1:40000->127.0.0.1:2379]", "-1 EAGAIN (Resource temporarily unavailable)", 3, 5, 5, false},
	}
	if len(calls) != len(want) {
		t.Fatalf("%d calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i, w := range want {
		c := calls[i]
		if c.Name != w.name || c.Path != w.path || c.Ret != w.ret || c.FD != w.fd || c.Start != w.start || c.End != w.end || c.OK() != w.ok {
			t.Errorf("call %d = %+v (ok %v), want %+v", i, c, c.OK(), w)
		}
	}
	if _, err := ParseStrace(strings.NewReader("5 <... fsync resumed>) = 0\n")); err == nil {
		t.Error("a resumed call without its start was accepted")
	}
}

// ParseStrace never panics, and every call it returns ends after it
// starts or is still unfinished.
func FuzzParseStrace(f *testing.F) {
	f.Add(sample)
	f.Add("1 x(\n1 <... x resumed>")
	f.Fuzz(func(t *testing.T, log string) {
		calls, err := ParseStrace(strings.NewReader(log))
		if err != nil {
			return
		}
		for _, c := range calls {
			if c.End != -1 && c.End < c.Start {
				t.Fatalf("call %+v ends before it starts", c)
			}
		}
	})
}

// Data unescapes strace's quoting, octal and hex; h2Frames splits frames
// after the client preface and keeps an incomplete tail.
func TestDataAndFrames(t *testing.T) {
	c := Call{Args: `3<TCP:[1]>, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\7\0\1\0\0\0\1\0\0\0\0\2\10\x01\"\\\0\0", 40) = 40`}
	got := c.Data()
	want := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x07\x00\x01\x00\x00\x00\x01" + "\x00\x00\x00\x00\x02\x08\x01" + "\"\\\x00\x00"
	if string(got) != want {
		t.Fatalf("Data() = %q, want %q", got, want)
	}
	frames, rest := h2Frames(got)
	if len(frames) != 1 || frames[0].Type != 0 || frames[0].Stream != 1 || string(rest) != "\"\\\x00\x00" {
		t.Fatalf("frames %+v, rest %q", frames, rest)
	}
	msg, ok := frames[0].grpcMessage()
	if !ok || string(msg) != "\x08\x01" {
		t.Fatalf("gRPC message %q, %v", msg, ok)
	}
}
