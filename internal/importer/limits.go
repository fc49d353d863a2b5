package importer

import (
	"bytes"
	"errors"
	"fmt"
)

// Bounds of what an import reads, checked before anything is decoded:
// YAML parsers spend time and memory on every level of nesting for every
// token below it, so that one small document of deeply nested lists can
// keep a decoder busy for many seconds and hundreds of MiB. The objects
// imported (IPPools, NetworkAttachmentDefinitions, Calico's blocks, as
// kubectl and etcdctl print them) nest fewer than a dozen levels.
const (
	// MaxSourceBytes bounds one input (a file, or standard input).
	MaxSourceBytes = 256 << 20
	// MaxNesting bounds how deeply the collections of an input nest
	// (CheckNesting counts block collections generously: up to two
	// levels per indentation level).
	MaxNesting = 64
)

// ErrSourceLimit: an input is over MaxSourceBytes or nests deeper than
// MaxNesting. It comes wrapped with ErrInvalidSource.
var ErrSourceLimit = errors.New("over a limit of the importer")

// CheckSource checks one input, named name in errors, against
// MaxSourceBytes and MaxNesting (see CheckNesting).
func CheckSource(name string, data []byte) error {
	if len(data) > MaxSourceBytes {
		return sizeError(name, len(data))
	}
	return CheckNesting(name, data)
}

func sizeError(name string, size int) error {
	return fmt.Errorf("%w: %w: %s is %d bytes, more than the limit of %d (%d MiB)",
		ErrInvalidSource, ErrSourceLimit, name, size, MaxSourceBytes, MaxSourceBytes>>20)
}

func nestingError(name string, line int) error {
	return fmt.Errorf("%w: %w: %s, line %d: collections nest more than %d levels deep (the limit of the importer)",
		ErrInvalidSource, ErrSourceLimit, name, line, MaxNesting)
}

// CheckJSONSource is CheckSource for JSON values with lines of etcd keys
// ("/calico/...") between them, as etcdctl prints them: the keys are not
// YAML, so the nesting counted is that of the JSON arrays and objects.
func CheckJSONSource(name string, data []byte) error {
	if len(data) > MaxSourceBytes {
		return sizeError(name, len(data))
	}
	depth, line, inString, lineStart := 0, 1, false, true
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\n':
			line++
			lineStart = true
			continue
		case inString && c == '\\':
			i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > MaxNesting {
				return nestingError(name, line)
			}
		case (c == ']' || c == '}') && depth > 0:
			depth--
		case c == '/' && lineStart && depth == 0:
			// A key: up to the end of the line.
			for i+1 < len(data) && data[i+1] != '\n' {
				i++
			}
		}
		lineStart = lineStart && (c == ' ' || c == '\t' || c == '\r')
	}
	return nil
}

// CheckNesting refuses YAML (and so JSON) in which collections nest deeper
// than MaxNesting, without decoding it: one pass over the text that
// follows quoted scalars, block scalars, comments and flow collections,
// and counts for each line the flow collections open, the block
// indentation levels enclosing it and its block indicators ("- ", "? ",
// ": "). What it counts for block collections is an upper bound of their
// nesting (twice the indentation levels: a sequence may sit at its
// parent key's indentation), so that no document the decoder would nest
// deeper than MaxNesting passes.
func CheckNesting(name string, data []byte) error {
	if depth, line := deepest(data, MaxNesting); depth > MaxNesting {
		return nestingError(name, line)
	}
	return nil
}

// deepest returns the deepest nesting CheckNesting counts in data and the
// line (from 1) it counted it on, stopping at the first line past limit.
func deepest(data []byte, limit int) (depth, line int) {
	s := nestScan{blockScalar: -1, plainCont: -2}
	n := 0
	for l := range bytes.Lines(data) {
		n++
		if d := s.line(bytes.TrimRight(l, "\r\n")); d > depth {
			depth, line = d, n
			if depth > limit {
				break
			}
		}
	}
	return depth, line
}

// nestScan is CheckNesting's state between lines.
type nestScan struct {
	// indents are the indentations of the block lines enclosing the
	// current one.
	indents []int
	// flow is the depth of open flow collections; base is the block
	// depth counted where the outermost one opened.
	flow, base int
	// quote is the quote character of a quoted scalar that goes on past
	// the end of the line, 0 when none does.
	quote byte
	// blockScalar is the indentation content lines of a block scalar
	// ("|", ">") must exceed, -1 outside one; scalarIndent is its
	// content's indentation once its first line set it (0 before).
	blockScalar, scalarIndent int
	// plainCont: a plain scalar in block context ended its line; lines
	// indented more than plainCont continue it. -2 when none did.
	plainCont int
	// flowPlain: a plain scalar in flow context ended its line; it goes
	// on on the next.
	flowPlain bool
	// afterNode: the last token was a scalar or a closed flow collection:
	// a ':' after it is its value indicator (in flow context even without
	// a blank after it), not one more level.
	afterNode bool
}

// isSpace tells a separating blank.
func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// isFlowIndicator tells the characters that end a plain scalar in flow
// context.
func isFlowIndicator(c byte) bool { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}' }

// line scans one line (without its line break) and returns the deepest
// nesting it counted on it.
func (s *nestScan) line(l []byte) int {
	indent := 0
	for indent < len(l) && l[indent] == ' ' {
		indent++
	}
	blank := indent == len(l) || isSpace(l[indent]) && len(bytes.TrimLeft(l, " \t")) == 0
	// Content of a block scalar: text, whatever it holds.
	if s.blockScalar >= 0 {
		if blank {
			return 0
		}
		if s.scalarIndent == 0 && indent > s.blockScalar {
			s.scalarIndent = indent
		}
		if s.scalarIndent > 0 && indent >= s.scalarIndent {
			return 0
		}
		s.blockScalar, s.scalarIndent = -1, 0
	}
	marker := indent == 0 && (bytes.HasPrefix(l, []byte("---")) || bytes.HasPrefix(l, []byte("..."))) && (len(l) == 3 || isSpace(l[3]))
	i := 0
	switch {
	case s.quote != 0:
		// A quoted scalar's next line: text up to its closing quote.
		if i = s.closeQuote(l, 0); i < 0 {
			return 0
		}
		s.afterNode = true
	case s.flow > 0:
		// Inside a flow collection lines do not matter, but a plain
		// scalar goes on.
		if s.flowPlain {
			i = indent
			for i < len(l) && isSpace(l[i]) {
				i++
			}
			var ended bool
			i, ended = s.plain(l, i)
			s.flowPlain = !ended
			s.afterNode = true
		}
	default:
		if blank {
			return 0
		}
		if l[indent] == '#' {
			s.plainCont = -2 // a comment line ends a plain scalar
			return 0
		}
		if !marker && s.plainCont >= -1 && indent > s.plainCont {
			return 0 // a multi-line plain scalar goes on
		}
		s.plainCont = -2
		if indent == 0 && l[0] == '%' {
			return 0 // a directive
		}
		for len(s.indents) > 0 && s.indents[len(s.indents)-1] >= indent {
			s.indents = s.indents[:len(s.indents)-1]
		}
		s.indents = append(s.indents, indent)
		i = indent
		if marker {
			s.indents = s.indents[:0]
			i = 3
		}
	}
	return s.tokens(l, i, indent)
}

// tokens scans l from i on, indent being the line's indentation, and
// returns the deepest nesting counted.
func (s *nestScan) tokens(l []byte, i, indent int) int {
	indicators := 0
	nodeCol := indent // where the innermost block node of the line starts
	depth := func() int {
		if s.flow > 0 {
			return s.base + s.flow
		}
		return 2*len(s.indents) + 2*indicators
	}
	deepest := depth()
	for i < len(l) {
		c := l[i]
		if isSpace(c) {
			i++
			continue
		}
		next := byte(' ')
		if i+1 < len(l) {
			next = l[i+1]
		}
		sep := isSpace(next) || s.flow > 0 && isFlowIndicator(next)
		after := s.afterNode
		s.afterNode = false
		switch {
		case c == '#':
			return deepest // a comment: a token starts only after a blank
		case c == '\'' || c == '"':
			s.quote = c
			start := i
			if i = s.closeQuote(l, i+1); i < 0 {
				return deepest
			}
			s.afterNode = true
			if s.flow == 0 && i < len(l) && l[i] == ':' {
				nodeCol = start
			}
		case c == '[' || c == '{':
			if s.flow == 0 {
				s.base = depth()
			}
			s.flow++
			i++
		case (c == ']' || c == '}') && s.flow > 0:
			s.flow--
			s.afterNode = true
			i++
		case c == ',' && s.flow > 0:
			i++
		case c == ':' && after && (sep || s.flow > 0):
			i++ // a key's value
		case (c == '-' || c == '?' || c == ':') && sep:
			if s.flow == 0 {
				indicators++
				if c == '-' {
					nodeCol = i
				}
			}
			i++
		case (c == '|' || c == '>') && s.flow == 0:
			// A block scalar: its header ends the line, its content
			// lines follow. An explicit indentation (a digit) gives
			// their indentation relative to the node's.
			s.blockScalar = nodeCol
			for _, h := range l[i+1:] {
				if h >= '1' && h <= '9' {
					s.scalarIndent = nodeCol + int(h-'0')
					break
				}
				if h != '+' && h != '-' {
					break
				}
			}
			return deepest
		case c == '&' || c == '!':
			// An anchor or a tag: the node follows.
			for i < len(l) && !isSpace(l[i]) && !(s.flow > 0 && isFlowIndicator(l[i])) {
				i++
			}
		default:
			// A plain scalar (or an alias).
			start := i
			var ended bool
			i, ended = s.plain(l, i)
			s.afterNode = true
			switch {
			case !ended && s.flow > 0:
				s.flowPlain = true
			case !ended:
				// Deeper lines may go on with it: deeper than its
				// collection's indentation, which is at most nodeCol
				// (below that of a scalar opening the line).
				s.plainCont = nodeCol
				if start == indent && indicators == 0 {
					s.plainCont = indent - 1
				}
				return deepest
			case s.flow == 0 && i < len(l) && l[i] == ':':
				nodeCol = start
			}
		}
		deepest = max(deepest, depth())
	}
	return deepest
}

// closeQuote returns where the quoted scalar open in s.quote ends on l
// (scanning from i), after its closing quote; -1 when it goes on past the
// line.
func (s *nestScan) closeQuote(l []byte, i int) int {
	for ; i < len(l); i++ {
		switch {
		case s.quote == '"' && l[i] == '\\':
			i++
		case l[i] == s.quote && s.quote == '\'' && i+1 < len(l) && l[i+1] == '\'':
			i++ // '' inside single quotes
		case l[i] == s.quote:
			s.quote = 0
			return i + 1
		}
	}
	return -1
}

// plain skips a plain scalar starting at i and returns where it ended;
// ended is false when it reaches the end of the line (in block context it
// may go on on the next lines).
func (s *nestScan) plain(l []byte, i int) (int, bool) {
	for ; i < len(l); i++ {
		c := l[i]
		if c == ':' && (i+1 == len(l) || isSpace(l[i+1]) || s.flow > 0 && isFlowIndicator(l[i+1])) {
			return i, true
		}
		if c == '#' && i > 0 && isSpace(l[i-1]) {
			return len(l), true // a comment ends the line
		}
		if s.flow > 0 && isFlowIndicator(c) {
			return i, true
		}
	}
	return i, false
}
