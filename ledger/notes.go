package ledger

import (
	"context"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Notes are small named values kept with the ledger, where every process
// that uses it (serve, the CLI, Lambda) can read them: package audit keeps
// the last audit's summary under AuditNote, however the audit was run, and
// the status page shows it. A note is replaced whole by each PutNote (the
// last writer wins); it is not a record: it is never claimed, counted,
// listed, replayed or purged.
//
// A backend keeps notes by implementing NoteKeeper, outside Backend so that
// a backend written before it still compiles; every backend of this module
// does (SQL: table cairn_meta; object store: meta/NAME.json under the
// ledger's prefix; DynamoDB: an item beside the ledger's descriptor).

// AuditNote is the note the last audit's summary is kept under.
const AuditNote = "audit.last"

// MaxNote is the largest note value, in bytes.
const MaxNote = 64 << 10

// ErrNoNotes: the ledger's backend keeps no notes (it does not implement
// NoteKeeper).
var ErrNoNotes = errors.New("ledger: this ledger's backend keeps no notes (it does not implement ledger.NoteKeeper)")

// NoteKeeper is what a backend implements to keep notes. Names are checked
// by the Ledger (1 to 64 bytes of a-z, 0-9, '.', '_', '-'); values are
// valid UTF-8 without NUL, at most MaxNote bytes.
type NoteKeeper interface {
	// PutNote stores value under name, replacing any earlier value.
	PutNote(ctx context.Context, name string, value []byte) error
	// Note returns the value stored under name; nil and no error if none.
	Note(ctx context.Context, name string) ([]byte, error)
}

func checkNoteName(name string) error {
	if name == "" || len(name) > 64 {
		return errors.New("ledger: a note's name is 1 to 64 bytes, not " + strconv.Itoa(len(name)))
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return errors.New("ledger: a note's name is made of a-z, 0-9, '.', '_' and '-': " + strconv.Quote(name))
		}
	}
	return nil
}

// PutNote keeps value under name for every process using the ledger (see
// NoteKeeper); value must be valid UTF-8 without NUL (JSON, say) of at most
// MaxNote bytes. ErrNoNotes if the backend keeps none.
func (l *Ledger) PutNote(ctx context.Context, name string, value []byte) error {
	if err := checkNoteName(name); err != nil {
		return err
	}
	if len(value) > MaxNote || !utf8.Valid(value) || containsNUL(value) {
		return errors.New("ledger: a note's value is valid UTF-8 without NUL of at most " + strconv.Itoa(MaxNote) + " bytes (" + strconv.Itoa(len(value)) + " given)")
	}
	k, ok := l.b.(NoteKeeper)
	if !ok {
		return ErrNoNotes
	}
	return k.PutNote(ctx, name, value)
}

// Note returns the value kept under name, or nil if there is none.
// ErrNoNotes if the backend keeps none.
func (l *Ledger) Note(ctx context.Context, name string) ([]byte, error) {
	if err := checkNoteName(name); err != nil {
		return nil, err
	}
	k, ok := l.b.(NoteKeeper)
	if !ok {
		return nil, ErrNoNotes
	}
	return k.Note(ctx, name)
}

func containsNUL(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			return true
		}
	}
	return false
}
