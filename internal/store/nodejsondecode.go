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

// Bits of the keys an object has given, to refuse repeated keys.
const (
	key0 uint = 1 << iota
	key1
	key2
	key3
	key4
	key5
	key6
	key7
	key8
)

func (p *nodeParser) nodeSpec() (spec NodeSpec, ok bool) {
	if !p.eat('{') {
		return spec, false
	}
	var seen uint
	for first := true; ; first = false {
		key, more, ok := p.nextKey(first)
		if !ok {
			return spec, false
		}
		if !more {
			return spec, true
		}
		var bit uint
		switch key {
		case "blocks":
			bit = key0
			spec.Blocks, ok = p.blocks()
		case "handles":
			bit = key1
			spec.Handles, ok = p.handles()
		case "loans":
			bit = key2
			spec.Loans, ok = p.loans()
		}
		if !ok || bit == 0 || seen&bit != 0 {
			return spec, false
		}
		seen |= bit
	}
}

func (p *nodeParser) blocks() ([]BlockSpec, bool) {
	out := []BlockSpec{}
	if !p.eat('[') {
		return nil, false
	}
	for first := true; ; first = false {
		more, ok := p.nextElem(first)
		if !ok {
			return nil, false
		}
		if !more {
			return out, true
		}
		var b BlockSpec
		if !p.eat('{') {
			return nil, false
		}
		var seen uint
		for first := true; ; first = false {
			key, more, ok := p.nextKey(first)
			if !ok {
				return nil, false
			}
			if !more {
				break
			}
			var bit uint
			switch key {
			case "pool":
				bit = key0
				b.Pool, ok = p.str()
			case "cidr":
				bit = key1
				b.CIDR, ok = p.prefix()
			case "free":
				bit = key2
				b.Free, ok = p.str()
			}
			if !ok || bit == 0 || seen&bit != 0 {
				return nil, false
			}
			seen |= bit
		}
		out = append(out, b)
	}
}

func (p *nodeParser) handles() ([]HandleSpec, bool) {
	// A plugin's record with two addresses is some 290 bytes: room for
	// all of them without growing the slice, copying records.
	out := make([]HandleSpec, 0, len(p.data)/256)
	if !p.eat('[') {
		return nil, false
	}
	for first := true; ; first = false {
		more, ok := p.nextElem(first)
		if !ok {
			return nil, false
		}
		if !more {
			return out, true
		}
		out = append(out, HandleSpec{})
		if !p.handle(&out[len(out)-1]) {
			return nil, false
		}
	}
}

func (p *nodeParser) handle(h *HandleSpec) bool {
	if !p.eat('{') {
		return false
	}
	var seen uint
	for first := true; ; first = false {
		key, more, ok := p.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		var bit uint
		switch key {
		case "id":
			bit = key0
			h.ID, ok = p.str()
		case "attachment":
			bit = key1
			h.Attachment, ok = p.attachment()
		case "node":
			bit = key2
			h.Node, ok = p.str()
		case "netns":
			bit = key3
			h.NetNS, ok = p.str()
		case "namespace":
			bit = key4
			h.Namespace, ok = p.str()
		case "pod":
			bit = key5
			h.Pod, ok = p.str()
		case "podUID":
			bit = key6
			h.PodUID, ok = p.str()
		case "created":
			bit = key7
			var s, e int
			if s, e, ok = p.strBounds(); ok {
				// The quoted string, as encoding/json passes it.
				ok = h.Created.UnmarshalJSON(p.data[s-1:e+1]) == nil
			}
		case "ips":
			bit = key8
			h.IPs, ok = p.addrs()
		}
		if !ok || bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
}

func (p *nodeParser) attachment() (*[3]string, bool) {
	var att [3]string
	if !p.eat('[') {
		return nil, false
	}
	for i := range att {
		if i > 0 && !p.eat(',') {
			return nil, false
		}
		var ok bool
		if att[i], ok = p.str(); !ok {
			return nil, false
		}
	}
	if !p.eat(']') {
		return nil, false
	}
	return &att, true
}

// addrs reads a record's addresses into p.ips, where those of all records
// are allocated together, returning the slice of them, capped.
func (p *nodeParser) addrs() ([]AddrSpec, bool) {
	if p.ips == nil {
		p.ips = make([]AddrSpec, 0, 64) // never nil: [] is not null
	}
	start := len(p.ips)
	if !p.eat('[') {
		return nil, false
	}
	for first := true; ; first = false {
		more, ok := p.nextElem(first)
		if !ok {
			return nil, false
		}
		if !more {
			return p.ips[start:len(p.ips):len(p.ips)], true
		}
		var a AddrSpec
		if !p.eat('{') {
			return nil, false
		}
		var seen uint
		for first := true; ; first = false {
			key, more, ok := p.nextKey(first)
			if !ok {
				return nil, false
			}
			if !more {
				break
			}
			var bit uint
			switch key {
			case "addr":
				bit = key0
				a.Addr, ok = p.addr()
			case "pool":
				bit = key1
				a.Pool, ok = p.str()
			}
			if !ok || bit == 0 || seen&bit != 0 {
				return nil, false
			}
			seen |= bit
		}
		p.ips = append(p.ips, a)
	}
}

func (p *nodeParser) loans() ([]LoanSpec, bool) {
	out := []LoanSpec{}
	if !p.eat('[') {
		return nil, false
	}
	for first := true; ; first = false {
		more, ok := p.nextElem(first)
		if !ok {
			return nil, false
		}
		if !more {
			return out, true
		}
		var l LoanSpec
		if !p.eat('{') {
			return nil, false
		}
		var seen uint
		for first := true; ; first = false {
			key, more, ok := p.nextKey(first)
			if !ok {
				return nil, false
			}
			if !more {
				break
			}
			var bit uint
			switch key {
			case "handle":
				bit = key0
				l.Handle, ok = p.str()
			case "lender":
				bit = key1
				l.Lender, ok = p.str()
			}
			if !ok || bit == 0 || seen&bit != 0 {
				return nil, false
			}
			seen |= bit
		}
		out = append(out, l)
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
