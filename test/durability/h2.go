package durability

import (
	"encoding/binary"
	"strconv"
	"strings"
)

// Data returns the bytes of the call's first string argument (what a
// write sent or a read received), unescaped from strace's quoting (\ooo
// octal or \xhh hex, \n \t \r \v \f \" \\); nil when there is none. A
// string strace truncated (-s) is returned as far as it was printed.
func (c Call) Data() []byte {
	i := strings.IndexByte(c.Args, '"')
	if i < 0 {
		return nil
	}
	s := c.Args[i+1:]
	var out []byte
	for j := 0; j < len(s); j++ {
		ch := s[j]
		if ch == '"' {
			break
		}
		if ch != '\\' || j+1 >= len(s) {
			out = append(out, ch)
			continue
		}
		j++
		switch e := s[j]; {
		case e == 'x' && j+2 < len(s):
			v, err := strconv.ParseUint(s[j+1:j+3], 16, 8)
			if err == nil {
				out = append(out, byte(v))
				j += 2
				continue
			}
			out = append(out, e)
		case e >= '0' && e <= '7':
			k := j
			for k < len(s) && k < j+3 && s[k] >= '0' && s[k] <= '7' {
				k++
			}
			v, _ := strconv.ParseUint(s[j:k], 8, 8)
			out = append(out, byte(v))
			j = k - 1
		case e == 'n':
			out = append(out, '\n')
		case e == 't':
			out = append(out, '\t')
		case e == 'r':
			out = append(out, '\r')
		case e == 'v':
			out = append(out, '\v')
		case e == 'f':
			out = append(out, '\f')
		default: // \" and \\
			out = append(out, e)
		}
	}
	return out
}

// h2Frame is one HTTP/2 frame.
type h2Frame struct {
	Type    byte
	Flags   byte
	Stream  uint32
	Payload []byte
}

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2Frames splits b into whole HTTP/2 frames (after the client preface,
// when b starts with it) and returns what is left of an incomplete last
// frame.
func h2Frames(b []byte) ([]h2Frame, []byte) {
	if len(b) >= len(h2Preface) && string(b[:len(h2Preface)]) == h2Preface {
		b = b[len(h2Preface):]
	}
	var out []h2Frame
	for len(b) >= 9 {
		n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		if len(b) < 9+n {
			break
		}
		out = append(out, h2Frame{Type: b[3], Flags: b[4], Stream: binary.BigEndian.Uint32(b[5:9]) & 0x7fffffff, Payload: b[9 : 9+n]})
		b = b[9+n:]
	}
	return out, b
}

// grpcMessage returns the message of a DATA frame holding one whole,
// uncompressed gRPC message.
func (f h2Frame) grpcMessage() ([]byte, bool) {
	if f.Type != 0 {
		return nil, false
	}
	p := f.Payload
	if f.Flags&0x8 != 0 { // PADDED
		if len(p) < 1 || int(p[0]) > len(p)-1 {
			return nil, false
		}
		p = p[1 : len(p)-int(p[0])]
	}
	if len(p) < 5 || p[0] != 0 || int(binary.BigEndian.Uint32(p[1:5])) != len(p)-5 {
		return nil, false
	}
	return p[5:], true
}
