package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// unmarshalDocument decodes a whole JSON document into dst (a struct of
// json.RawMessage fields), reporting where malformed JSON breaks.
func unmarshalDocument(data []byte, dst any) error {
	err := json.Unmarshal(data, dst)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		// Offset counts the bytes read including the offending one.
		line, col := lineCol(data, syn.Offset-1)
		return &FieldError{Reason: fmt.Sprintf("malformed JSON at line %d, column %d: %s", line, col, syn.Error())}
	}
	return &FieldError{Reason: fmt.Sprintf("network config must be a JSON object, not %s", kindOf(data))}
}

// lineCol turns a byte offset into a 1-based line and column.
func lineCol(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	if offset < 0 {
		offset = 0
	}
	before := data[:offset]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = 1 + utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:])
	return line, col
}

// present reports whether a key was given with a non-null value.
func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}

// kindOf names the JSON type of raw for messages.
func kindOf(raw []byte) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// wrongType reports that key holds the wrong JSON type.
func wrongType(key, want string, raw json.RawMessage) error {
	return invalid(key, "must be %s, not %s", want, kindOf(raw))
}

// maxQuoted bounds how much of a value a message repeats.
const maxQuoted = 80

// quote quotes a user-supplied value for a message, shortening long ones.
func quote(s string) string {
	if len(s) > maxQuoted {
		cut := maxQuoted
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// str decodes a JSON string.
func str(raw json.RawMessage, key string) (string, error) {
	var s string
	if kindOf(raw) != "a string" || json.Unmarshal(raw, &s) != nil {
		return "", wrongType(key, "a string", raw)
	}
	return s, nil
}

// list decodes a JSON array into its raw elements.
func list(raw json.RawMessage, key string) ([]json.RawMessage, error) {
	var l []json.RawMessage
	if kindOf(raw) != "an array" || json.Unmarshal(raw, &l) != nil {
		return nil, wrongType(key, "an array", raw)
	}
	return l, nil
}

// strList decodes a JSON array of strings.
func strList(raw json.RawMessage, key string) ([]string, error) {
	return boundedStrList(raw, key, MaxConfigBytes)
}

// boundedStrList decodes a JSON array of at most limit strings.
func boundedStrList(raw json.RawMessage, key string, limit int) ([]string, error) {
	l, err := boundedList(raw, key, limit, "entries")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(l))
	for i, el := range l {
		s, err := str(el, fmt.Sprintf("%s[%d]", key, i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// object decodes a JSON object into dst, a struct of json.RawMessage fields.
func object(raw json.RawMessage, key string, dst any) error {
	if kindOf(raw) != "an object" || json.Unmarshal(raw, dst) != nil {
		return wrongType(key, "an object", raw)
	}
	return nil
}

// integer decodes a JSON number that is a whole number fitting in an int32.
func integer(raw json.RawMessage, key string) (int, error) {
	if kindOf(raw) != "a number" {
		return 0, wrongType(key, "an integer", raw)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, wrongType(key, "an integer", raw)
	}
	v, err := n.Int64()
	if err != nil || v < math.MinInt32 || v > math.MaxInt32 {
		return 0, invalid(key, "%s is not an integer in range", quote(n.String()))
	}
	return int(v), nil
}

// boolean decodes a JSON boolean.
func boolean(raw json.RawMessage, key string) (bool, error) {
	var b bool
	if kindOf(raw) != "a boolean" || json.Unmarshal(raw, &b) != nil {
		return false, wrongType(key, "a boolean", raw)
	}
	return b, nil
}
