package cli

import (
	"io"
	"strings"
	"unicode"

	"golang.org/x/text/width"
)

// textTable lays text out in columns, two spaces apart, aligned by display
// width: a wide (CJK) character takes two terminal cells and a combining mark
// none, where text/tabwriter counts every rune as one cell and misaligns every
// row holding such a key. Cells are shown as given: escape them first
// (safetext.Escape), which leaves only printable runes.
//
// write may be called again with more rows (a listing written page by page):
// the columns keep the widths they had, widened if a new row needs it.
type textTable struct {
	rows   [][]string
	widths []int
}

func (t *textTable) add(cells ...string) { t.rows = append(t.rows, cells) }

// write writes the rows added since the last write; the last cell of a row
// is not padded.
func (t *textTable) write(w io.Writer) error {
	widths := t.widths
	for _, r := range t.rows {
		for i, c := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], displayWidth(c))
		}
	}
	var sb strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			sb.WriteString(c)
			if i < len(r)-1 {
				sb.WriteString(strings.Repeat(" ", widths[i]-displayWidth(c)+2))
			}
		}
		sb.WriteByte('\n')
	}
	t.rows, t.widths = t.rows[:0], widths
	_, err := io.WriteString(w, sb.String())
	return err
}

// displayWidth is how many terminal cells s takes: two for East Asian wide
// and fullwidth runes, none for combining marks and format characters, one
// for the rest.
func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		case width.LookupRune(r).Kind() == width.EastAsianWide || width.LookupRune(r).Kind() == width.EastAsianFullwidth:
			n += 2
		default:
			n++
		}
	}
	return n
}
