package ledgertest

import (
	"errors"
	"testing"

	"github.com/cairn-s3/cairn/ledger"
)

// testNotes: a note is kept for every handle of the ledger (another
// process's included), replaced whole, and is no record (issue 38: the last
// audit, however it was run, for the status page). A backend that keeps no
// notes says so (ledger.ErrNoNotes).
func testNotes(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, url := h.New(t, nil)
	if got, err := l.Note(ctx, ledger.AuditNote); errors.Is(err, ledger.ErrNoNotes) {
		t.Skip("this backend keeps no notes (it does not implement ledger.NoteKeeper)")
	} else if err != nil || got != nil {
		t.Fatalf("an absent note: %q %v, want nil", got, err)
	}
	for _, v := range []string{`{"first":true}`, `{"second":"ünï \u202e"}`} {
		if err := l.PutNote(ctx, ledger.AuditNote, []byte(v)); err != nil {
			t.Fatal(err)
		}
		if got, err := l.Note(ctx, ledger.AuditNote); err != nil || string(got) != v {
			t.Fatalf("note: %q %v, want %q", got, err, v)
		}
	}
	if err := l.PutNote(ctx, "Bad Name", []byte("x")); err == nil {
		t.Fatal("a note's name with spaces and capitals was accepted")
	}
	if err := l.PutNote(ctx, "other", []byte("a\x00b")); err == nil {
		t.Fatal("a note with NUL was accepted")
	}
	counts, err := l.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for s, n := range counts {
		if n != 0 {
			t.Fatalf("a note shows as %d %s records", n, s)
		}
	}
	if cs, err := l.List(ctx, ledger.Filter{Limit: 10}); err != nil || len(cs) != 0 {
		t.Fatalf("a note is listed: %+v %v", cs, err)
	}
	if cs, err := l.Claim(ctx, 10, 60e9); err != nil || len(cs) != 0 {
		t.Fatalf("a note is claimed: %+v %v", cs, err)
	}
	if url == "" {
		return
	}
	if got, err := h.open(t, url).Note(ctx, ledger.AuditNote); err != nil || string(got) != `{"second":"ünï \u202e"}` {
		t.Fatalf("another handle reads the note as %q %v", got, err)
	}
}
