package ledger

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxClass is how many bytes of an error class are kept.
const maxClass = 240

// NoError is the class of a record that failed without a recorded error.
const NoError = "(no error recorded)"

// ErrorClass normalises an error message to its class, so that the dead
// letters of one cause group together however their messages differ in the
// details: a quoted value ("…", '…' or `…`) becomes "…" in its quotes; a word
// that holds a digit (a number, an id, a hex digest, a version such as v2)
// becomes #, and #s joined by . : - / _ + or , (an address, a time stamp, a
// UUID) become one #; runs of white space become one space. The class is cut
// to 240 bytes. Two messages with the same class tell the operator the same
// thing. The SQL ledgers store each record's class beside its error
// (see ErrorGrouper), and the status page groups and filters by it
// (GET /api/v1/status?error=CLASS).
func ErrorClass(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	b := make([]byte, 0, min(len(msg), maxClass+8))
	space := false
	for i := 0; i < len(msg) && len(b) < maxClass; {
		r, n := utf8.DecodeRuneInString(msg[i:])
		switch {
		case unicode.IsSpace(r):
			space = true
			i += n
			continue
		case space && len(b) > 0:
			b = append(b, ' ')
		}
		space = false
		switch {
		case r == '"' || (r == '\'' || r == '`') && (i == 0 || !isWord(lastRune(msg[:i]))):
			if end := closing(msg[i+1:], byte(r)); end >= 0 {
				b = append(b, byte(r))
				b = append(b, "…"...)
				b = append(b, byte(r))
				i += 1 + end + 1
				continue
			}
			b = append(b, byte(r))
			i += n
		case isWord(r):
			j := i
			digit := false
			for j < len(msg) {
				r, n := utf8.DecodeRuneInString(msg[j:])
				if !isWord(r) {
					break
				}
				digit = digit || ('0' <= r && r <= '9')
				j += n
			}
			switch {
			case !digit:
				b = append(b, msg[i:j]...)
			case joinedNumber(b):
				b = b[:len(b)-1] // the joining character: one # for the whole
			default:
				b = append(b, '#')
			}
			i = j
		default:
			b = utf8.AppendRune(b, r)
			i += n
		}
	}
	out := string(b)
	if len(out) > maxClass {
		k := maxClass
		for k > 0 && !utf8.RuneStart(out[k]) {
			k--
		}
		out = out[:k]
	}
	if out == "" {
		return NoError
	}
	return out
}

// isWord: letters, digits and underscores make the words ErrorClass reads.
func isWord(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// joinedNumber reports whether b ends with a # and one joining character:
// the next number then joins it (one # for 10.0.0.1 or 2026-11-27T14:39:36Z),
// and the joining character is dropped.
func joinedNumber(b []byte) bool {
	n := len(b)
	return n >= 2 && b[n-2] == '#' && strings.IndexByte(".:-/_+,", b[n-1]) >= 0
}

// closing is the index in s of the quote q that closes a quoted value (a
// backslash escapes the next byte inside "…"), or -1 if none on the same line.
func closing(s string, q byte) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if q == '"' {
				i++
			}
		case '\n':
			return -1
		case q:
			return i
		}
	}
	return -1
}

func lastRune(s string) rune {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r
}
