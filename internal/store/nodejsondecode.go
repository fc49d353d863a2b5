package store

import "net/netip"

// parseNodeSpec decodes the JSON of a node object as json.Unmarshal into
// a zero NodeSpec would, when it is of the plain form appendNodeSpec
// writes (with any whitespace JSON allows, keys in any order): false when
// it is not, and the caller must use json.Unmarshal. It declines rather
// than guess at whatever encoding/json treats in a way of its own: an
// unknown key, a key not spelled exactly as its tag (encoding/json folds
// case), a key given twice (encoding/json merges the two values), null,
// a string with an escape, a control character or a non-ASCII byte, an
// attachment not of three strings, a value of another type, or anything
// after the object. When it returns true json.Unmarshal succeeds on data
// and gives an equal NodeSpec (FuzzNodeSpecJSON checks this).
func parseNodeSpec(data []byte) (NodeSpec, bool) {
	p := nodeParser{data: data, text: string(data)}
	spec, ok := p.nodeSpec()
	p.ws()
	if !ok || p.pos != len(data) {
		return NodeSpec{}, false
	}
	return spec, true
}

// nodeParser reads data from pos on. Every string it decodes is a
// substring of text, data's one copy as a string: one allocation instead
// of one per string (which made parsing nearly twice as slow), at the
// price that a string kept from the result keeps all of text alive.
type nodeParser struct {
	data []byte
	text string
	pos  int
	ips  []AddrSpec // the addresses of the records read so far
}

func (p *nodeParser) nodeSpec() (spec NodeSpec, ok bool) {
	ok = p.object(func(key string) (bit uint, ok bool) {
		switch key {
		case "blocks":
			spec.Blocks, ok = p.blocks()
			return 1 << 0, ok
		case "handles":
			spec.Handles, ok = p.handles()
			return 1 << 1, ok
		case "loans":
			spec.Loans, ok = p.loans()
			return 1 << 2, ok
		}
		return 0, false
	})
	return spec, ok
}

func (p *nodeParser) blocks() ([]BlockSpec, bool) {
	out := []BlockSpec{}
	ok := p.array(func() bool {
		var b BlockSpec
		ok := p.object(func(key string) (bit uint, ok bool) {
			switch key {
			case "pool":
				b.Pool, ok = p.str()
				return 1 << 0, ok
			case "cidr":
				b.CIDR, ok = p.prefix()
				return 1 << 1, ok
			case "free":
				b.Free, ok = p.str()
				return 1 << 2, ok
			}
			return 0, false
		})
		out = append(out, b)
		return ok
	})
	return out, ok
}

func (p *nodeParser) handles() ([]HandleSpec, bool) {
	// A plugin's record with two addresses is some 290 bytes: room for
	// all of them without growing the slice, copying records.
	out := make([]HandleSpec, 0, len(p.data)/256)
	ok := p.array(func() bool {
		out = append(out, HandleSpec{})
		return p.handle(&out[len(out)-1])
	})
	return out, ok
}

func (p *nodeParser) handle(h *HandleSpec) bool {
	return p.object(func(key string) (bit uint, ok bool) {
		switch key {
		case "id":
			h.ID, ok = p.str()
			return 1 << 0, ok
		case "attachment":
			h.Attachment, ok = p.attachment()
			return 1 << 1, ok
		case "node":
			h.Node, ok = p.str()
			return 1 << 2, ok
		case "netns":
			h.NetNS, ok = p.str()
			return 1 << 3, ok
		case "namespace":
			h.Namespace, ok = p.str()
			return 1 << 4, ok
		case "pod":
			h.Pod, ok = p.str()
			return 1 << 5, ok
		case "podUID":
			h.PodUID, ok = p.str()
			return 1 << 6, ok
		case "created":
			var s, e int
			if s, e, ok = p.strBounds(); ok {
				// The quoted string, as encoding/json passes it.
				ok = h.Created.UnmarshalJSON(p.data[s-1:e+1]) == nil
			}
			return 1 << 7, ok
		case "ips":
			h.IPs, ok = p.addrs()
			return 1 << 8, ok
		case "sticky":
			h.Sticky, ok = p.str()
			return 1 << 9, ok
		case "parked":
			var s, e int
			if s, e, ok = p.strBounds(); ok {
				ok = h.Parked.UnmarshalJSON(p.data[s-1:e+1]) == nil
			}
			return 1 << 10, ok
		}
		return 0, false
	})
}

// attachment reads an array of exactly three strings.
func (p *nodeParser) attachment() (*[3]string, bool) {
	var att [3]string
	n := 0
	ok := p.array(func() bool {
		var ok bool
		if n < len(att) {
			att[n], ok = p.str()
		}
		n++
		return ok
	})
	return &att, ok && n == len(att)
}

// addrs reads a record's addresses into p.ips, where those of all records
// are allocated together, returning the slice of them, capped.
func (p *nodeParser) addrs() ([]AddrSpec, bool) {
	if p.ips == nil {
		p.ips = make([]AddrSpec, 0, 64) // never nil: [] is not null
	}
	start := len(p.ips)
	ok := p.array(func() bool {
		var a AddrSpec
		ok := p.object(func(key string) (bit uint, ok bool) {
			switch key {
			case "addr":
				a.Addr, ok = p.addr()
				return 1 << 0, ok
			case "pool":
				a.Pool, ok = p.str()
				return 1 << 1, ok
			}
			return 0, false
		})
		p.ips = append(p.ips, a)
		return ok
	})
	return p.ips[start:len(p.ips):len(p.ips)], ok
}

func (p *nodeParser) loans() ([]LoanSpec, bool) {
	out := []LoanSpec{}
	ok := p.array(func() bool {
		var l LoanSpec
		ok := p.object(func(key string) (bit uint, ok bool) {
			switch key {
			case "handle":
				l.Handle, ok = p.str()
				return 1 << 0, ok
			case "lender":
				l.Lender, ok = p.str()
				return 1 << 1, ok
			}
			return 0, false
		})
		out = append(out, l)
		return ok
	})
	return out, ok
}

// object reads an object, member reading the value of each key and
// returning the key's bit among the object's keys (to refuse one given
// twice), or 0 when it is not one of them.
func (p *nodeParser) object(member func(key string) (bit uint, ok bool)) bool {
	if !p.eat('{') {
		return false
	}
	var seen uint
	for first := true; ; first = false {
		key, more, ok := p.nextKey(first)
		if !ok || !more {
			return ok
		}
		bit, ok := member(key)
		if !ok || bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
}

// array reads an array, elem reading each element.
func (p *nodeParser) array(elem func() bool) bool {
	if !p.eat('[') {
		return false
	}
	for first := true; ; first = false {
		more, ok := p.nextElem(first)
		if !ok || !more {
			return ok
		}
		if !elem() {
			return false
		}
	}
}

// ws skips whitespace.
func (p *nodeParser) ws() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// eat skips whitespace and then c, or reports that c does not follow.
func (p *nodeParser) eat(c byte) bool {
	p.ws()
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// nextKey reads up to the value of an object's next member, after its
// '{' (first) or its previous member: the key, or more false at the '}'.
func (p *nodeParser) nextKey(first bool) (key string, more, ok bool) {
	p.ws()
	if p.pos >= len(p.data) {
		return "", false, false
	}
	switch c := p.data[p.pos]; {
	case c == '}':
		p.pos++
		return "", false, true
	case !first && c != ',':
		return "", false, false
	case !first:
		p.pos++
	}
	s, e, ok := p.strBounds()
	if !ok || !p.eat(':') {
		return "", false, false
	}
	return p.text[s:e], true, true
}

// nextElem reads up to an array's next element, after its '[' (first) or
// its previous element: more false at the ']'.
func (p *nodeParser) nextElem(first bool) (more, ok bool) {
	p.ws()
	if p.pos >= len(p.data) {
		return false, false
	}
	switch c := p.data[p.pos]; {
	case c == ']':
		p.pos++
		return false, true
	case !first && c != ',':
		return false, false
	case !first:
		p.pos++
	}
	return true, true
}

// str reads a plain string (strBounds).
func (p *nodeParser) str() (string, bool) {
	s, e, ok := p.strBounds()
	return p.text[s:e], ok
}

// strBounds skips whitespace and reads a string of printable ASCII
// characters without escapes, returning where its text starts and ends.
func (p *nodeParser) strBounds() (start, end int, ok bool) {
	if !p.eat('"') {
		return 0, 0, false
	}
	i := p.pos
	for i < len(p.data) && strPlain[p.data[i]] {
		i++
	}
	if i == len(p.data) || p.data[i] != '"' {
		return 0, 0, false
	}
	start, p.pos = p.pos, i+1
	return start, i, true
}

// strPlain holds the bytes strBounds reads in a string: printable ASCII
// but '"' and '\\'.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// addr reads a string as encoding/json decodes it into a netip.Addr:
// with Addr.UnmarshalText, which is ParseAddr but for "", the zero Addr.
// Calling ParseAddr on the substring itself spares UnmarshalText's copy.
func (p *nodeParser) addr() (netip.Addr, bool) {
	s, ok := p.str()
	if !ok || s == "" {
		return netip.Addr{}, ok
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

// prefix is addr for a netip.Prefix (Prefix.UnmarshalText, ParsePrefix).
func (p *nodeParser) prefix() (netip.Prefix, bool) {
	s, ok := p.str()
	if !ok || s == "" {
		return netip.Prefix{}, ok
	}
	pfx, err := netip.ParsePrefix(s)
	return pfx, err == nil
}
