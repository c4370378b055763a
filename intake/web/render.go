package web

import (
	"html/template"
	"strconv"
	"strings"

	"golang.org/x/text/unicode/norm"

	"github.com/cairn-s3/cairn/internal/safetext"
)

// show renders a value from the ledger or a sender (a key, a bucket, an
// error) as HTML that shows what it is. A value that would not show as
// itself is shown quoted with Go escapes, in a span of class esc: control
// characters and bidi overrides (a key DEAD\u202eRTL would show as DEADLTR),
// zero-width and other invisible characters, leading or trailing white space
// (invisible in a table), a leading quote (which would read as our quoting),
// and text not in Unicode NFC (e\u0301 shows like é; all its non-ASCII
// characters are then escaped, so the two spellings differ on the page).
// Everything else shows as itself, with its white space kept (two spaces
// are not one).
func show(s string) template.HTML {
	if safetext.Escape(s) == s && strings.TrimSpace(s) == s && norm.NFC.IsNormalString(s) {
		return template.HTML(`<span class="v">` + template.HTMLEscapeString(s) + `</span>`)
	}
	q := strconv.Quote(s)
	why := "shown quoted and escaped: it holds characters that would not show as themselves"
	if !norm.NFC.IsNormalString(s) {
		q = strconv.QuoteToASCII(s)
		why = "shown quoted and escaped: it is not in Unicode NFC, so it would look like another value"
	}
	return template.HTML(`<span class="esc" title="` + why + `">` + template.HTMLEscapeString(q) + `</span>`)
}
