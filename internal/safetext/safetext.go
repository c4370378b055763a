// Package safetext makes text safe to show a person: Redact hides the
// passwords in URLs and PostgreSQL connection strings before they are logged
// or printed, and Escape neutralises control characters in data (object keys,
// bucket names, error messages, handler output) before it reaches a terminal.
//
// Redact is deliberately greedy: where a string's structure is ambiguous it
// hides more than the password rather than risk showing part of it.
// Machine-readable output (JSON) needs neither: it carries exact values and
// encoding/json already escapes control characters.
package safetext

import (
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Mask replaces every hidden value.
const Mask = "xxxxx"

// Redact returns s with every password it can recognise replaced by Mask.
// It understands the forms pgx (the PostgreSQL driver) accepts:
//
//   - a URL's userinfo password: postgres://user:secret@host/db
//   - password= and sslpassword= query parameters (percent-encoded
//     spellings too): postgres://user@host/db?password=secret
//   - libpq keyword/value strings, quoted or not:
//     host=h user=u password=secret, password='with spaces'
//
// Any URL's userinfo password is hidden, whatever its scheme, as are query
// parameters and keywords whose names contain password, secret or token.
// Strings without any of these come back unchanged.
func Redact(s string) string {
	// First the values pgx itself would read as secrets, token by token as
	// it splits a keyword/value string; then the greedy passes below, which
	// also cover strings pgx would refuse or read as URLs.
	s = redactPGXKeywords(s)
	// Keywords first: a keyword value is hidden whole, whatever it holds
	// (even "://").
	s = redactKeywords(s)
	if strings.Contains(s, "://") {
		s = redactURLs(s)
	}
	return s
}

// sensitive reports whether a parameter or keyword name names a secret.
func sensitive(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "password") || strings.Contains(n, "secret") || strings.Contains(n, "token")
}

// redactURLs hides the userinfo password after every "://" in s and the
// sensitive query parameters of the first URL.
func redactURLs(s string) string {
	var b strings.Builder
	first := true
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i+3])
		rest := redactUserinfo(s[i+3:])
		if first {
			rest = redactQuery(rest)
			first = false
		}
		// A later "://" (a URL inside a parameter value) gets its own
		// userinfo pass; Mask contains no "://", so this terminates.
		j := strings.Index(rest, "://")
		if j < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:j])
		s = rest[j:]
	}
}

// redactUserinfo hides the password of the authority p begins with (p is
// what follows "scheme://").
func redactUserinfo(p string) string {
	slash := strings.IndexByte(p, '/')
	if slash < 0 {
		slash = len(p)
	}
	// pgx and libpq end the userinfo at the first '@' before any '/'; Go's
	// net/url at the last '@' of the authority. Hide the union: from the
	// first ':' up to the last '@' before the first '/'.
	if at := strings.LastIndexByte(p[:slash], '@'); at >= 0 {
		first := strings.IndexByte(p[:slash], '@')
		if colon := strings.IndexByte(p[:first], ':'); colon >= 0 {
			return p[:colon+1] + Mask + p[at:]
		}
		// No password at pgx's split, but net/url reads user:pass up to the
		// last '@'.
		if colon := strings.IndexByte(p[:at], ':'); colon >= 0 {
			return p[:colon+1] + Mask + p[at:]
		}
		return p
	}
	// No '@' before the path. A password holding an unencoded '/', '?' or
	// '#' strands its '@' further on (postgres://u:pa/ss@host/db): unless the
	// text before the path is a plain host list with numeric ports, hide
	// everything from its first ':' to the last '@'.
	at := strings.LastIndexByte(p, '@')
	if at < 0 {
		return p
	}
	end := strings.IndexAny(p, "/?#")
	if end < 0 || end > at {
		end = at
	}
	if plainHostList(p[:end]) {
		return p
	}
	colon := strings.IndexByte(p[:at], ':')
	if colon < 0 {
		return p
	}
	return p[:colon+1] + Mask + p[at:]
}

// plainHostList reports whether a is host[:port][,host[:port]]… with numeric
// ports (IPv6 literals in brackets), i.e. holds no stray ':' text.
func plainHostList(a string) bool {
	for part := range strings.SplitSeq(a, ",") {
		if strings.HasPrefix(part, "[") {
			end := strings.IndexByte(part, ']')
			if end < 0 {
				return false
			}
			part = part[end+1:]
			if part != "" && part[0] != ':' {
				return false
			}
		}
		_, port, ok := strings.Cut(part, ":")
		if !ok {
			continue
		}
		for _, c := range []byte(port) {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// redactQuery hides sensitive parameters of the query in p (the text after
// "scheme://"), which starts at its first '?' (queryStart). Parameters are
// split at '&' and also at every later '?': parsers disagree on where the
// query starts (Go's net/url at the first '?', even inside brackets; libpq,
// and pgx since v5.12, skip a bracketed host's contents, so in
// "postgres://[?=],?password=x" the password is x), and the greedy reading
// hides a parameter that any of them would see.
func redactQuery(p string) string {
	q := queryStart(p)
	if q < 0 {
		return p
	}
	var b strings.Builder
	b.WriteString(p[:q+1])
	rest := p[q+1:]
	for {
		end := strings.IndexAny(rest, "&?")
		pair := rest
		if end >= 0 {
			pair = rest[:end]
		}
		if key, _, ok := strings.Cut(pair, "="); ok {
			dec, err := url.QueryUnescape(key)
			if err != nil {
				dec = key
			}
			if sensitive(dec) {
				// The value runs to the next '&': every parser reads a
				// '?' in it as part of the value.
				b.WriteString(key + "=" + Mask)
				end = strings.IndexByte(rest, '&')
				if end < 0 {
					return b.String()
				}
				b.WriteByte('&')
				rest = rest[end+1:]
				continue
			}
		}
		b.WriteString(pair)
		if end < 0 {
			return b.String()
		}
		b.WriteByte(rest[end])
		rest = rest[end+1:]
	}
}

func queryStart(p string) int {
	i := 0
	for i < len(p) {
		switch p[i] {
		case '[':
			end := strings.IndexByte(p[i:], ']')
			if end < 0 {
				return strings.IndexByte(p, '?')
			}
			if q := strings.IndexByte(p[i:i+end], '?'); q >= 0 {
				// Go's url.Parse (and so pgx) splits the query off at the
				// first '?', brackets or not: "h[?password=x]".
				return i + q
			}
			i += end + 1
		case '?':
			return i
		default:
			i++
		}
	}
	return -1
}

const spaces = " \t\n\r\v\f"

// redactKeywords hides the values of sensitive keywords in a libpq
// keyword/value string (key = value, value 'quoted' with \ escapes or bare
// up to a space, \ escaping the next byte), tokenising as pgx does.
func redactKeywords(s string) string {
	if !strings.Contains(s, "=") {
		return s
	}
	var b strings.Builder
	for {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			b.WriteString(s)
			return b.String()
		}
		key := strings.TrimRight(s[:eq], spaces)
		// The keyword is the last word before '=' (pgx refuses a key with
		// spaces; judging its last word hides more, never less).
		if k := strings.LastIndexAny(key, spaces); k >= 0 {
			key = key[k+1:]
		}
		b.WriteString(s[:eq+1])
		s = s[eq+1:]
		v := len(s) - len(strings.TrimLeft(s, spaces))
		name := key
		urlish := strings.ContainsAny(key, "?&") && !strings.Contains(key, "://")
		if urlish {
			// A query parameter of something URL-like (postgres:h/db?…).
			name = key[strings.LastIndexAny(key, "?&")+1:]
		}
		n, closed := valueEnd(s[v:])
		if a := strings.IndexByte(s[v:v+n], '&'); urlish && a >= 0 {
			n, closed = a, true // such a value ends at '&' too
		}
		end := v + n
		switch {
		case sensitive(name) && !strings.Contains(key, "://"):
			b.WriteString(s[:v] + Mask)
		case !closed:
			// An unterminated quote: pgx refuses the string, whose intended
			// structure is unknown; look for passwords inside it too.
			end = v + 1
			b.WriteString(s[:end])
		default:
			b.WriteString(s[:end])
		}
		s = s[end:]
	}
}

// valueEnd is the length of the keyword value v begins with: a quoted
// string through its closing quote (all of v, not closed, if unterminated),
// else up to the first space; a backslash escapes the byte after it.
func valueEnd(v string) (n int, closed bool) {
	if strings.HasPrefix(v, "'") {
		for i := 1; i < len(v); i++ {
			switch v[i] {
			case '\\':
				i++
			case '\'':
				return i + 1, true
			}
		}
		return len(v), false
	}
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '\\':
			i++
		case strings.IndexByte(spaces, v[i]) >= 0:
			return i, true
		}
	}
	return len(v), true
}

// Escape returns s as it may be shown on a terminal: unchanged if every rune
// is printable (letters, marks, digits, punctuation, symbols and the ASCII
// space), else as a double-quoted Go string literal (strconv.Quote) in which
// control characters (C0, DEL, C1), other invisible runes and invalid UTF-8
// are escapes: "\x1b]0;title\a" shows instead of retitling the terminal. A
// string that begins with a double quote is quoted too, so that a quoted
// result is never mistaken for a raw one.
func Escape(s string) string {
	if safe(s) {
		return s
	}
	return strconv.Quote(s)
}

func safe(s string) bool {
	if strings.HasPrefix(s, `"`) {
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !unicode.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}

// URL is a URL or connection string as it may be shown: Redact, then Escape.
func URL(s string) string { return Escape(Redact(s)) }

// redactPGXKeywords hides the values of sensitive keys in s read as pgx
// reads a keyword/value connection string (its parseKeywordValueSettings):
// the key is everything before the next '=', trimmed; the value is a quoted
// string (backslash escapes) or runs to the next white space (backslash
// escapes). The greedy redactKeywords splits differently where the two
// readings disagree ("&=&= password=x", "0==' password=x'"); this pass
// agrees with pgx by construction. A string pgx would read as a URL, or
// refuse, is left to the other passes.
func redactPGXKeywords(s string) string {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") || !strings.Contains(s, "=") {
		return s
	}
	var b strings.Builder
	rest := s
	for len(rest) > 0 {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			break
		}
		key := strings.Trim(rest[:eq], spaces)
		b.WriteString(rest[:eq+1])
		rest = rest[eq+1:]
		v := len(rest) - len(strings.TrimLeft(rest, spaces))
		b.WriteString(rest[:v])
		rest = rest[v:]
		end, next := 0, 0
		if strings.HasPrefix(rest, "'") {
			end = 1
			for end < len(rest) && rest[end] != '\'' {
				if rest[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(rest) {
				return s // unterminated: pgx refuses the string
			}
			end++ // the closing quote
			next = end
		} else {
			for end < len(rest) && !strings.ContainsRune(spaces, rune(rest[end])) {
				if rest[end] == '\\' {
					end++
				}
				end++
			}
			end = min(end, len(rest))
			next = min(end+1, len(rest)) // pgx drops the one space after
		}
		// pgx takes its secrets from single-word keys; a key holding "://"
		// is a URL's text (the other passes judge it), and judging it here
		// would make the output depend on a secret inside it.
		if sensitive(key) && !strings.ContainsAny(key, spaces) && !strings.Contains(key, "://") && end > 0 {
			b.WriteString(Mask)
		} else {
			b.WriteString(rest[:end])
		}
		b.WriteString(rest[end:next])
		rest = rest[next:]
	}
	b.WriteString(rest)
	return b.String()
}
