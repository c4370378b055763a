// Package driver is for authors of ledger backends, not for users of a
// ledger: what a backend needs to behave exactly like cairn's own (package
// ledger/sqlite, ledger/postgres and ledger/objledger all use it). A backend
// implements ledger.Backend, registers an opener with ledger.Register, and
// passes the conformance suite ledger/ledgertest; users then reach it through
// ledger.Open or ledger.New, never through this package.
//
// Decide holds the ledger's acceptance rules: a backend reads a key's row,
// calls Decide inside its transaction and stores what Decide returns, so that
// every backend decides alike. Ident and SortSeq are how rows are keyed and
// ordered, SortClaims the order Claim returns its claims in, ClaimToken the
// fencing token a claim takes (VersionToken with Options.EveryVersion);
// UnixMilli and FromUnixMilli are how times are stored; Defaults and Backoff
// are how the shared ledger.Options are read.
//
// # Errors
//
// A backend reports ledger.ErrLeaseLost, ledger.ErrSuperseded,
// ledger.ErrNotFound, ledger.ErrUnavailable and ledger.ErrNoLedger (wrapped,
// so that errors.Is finds them); the suite checks that it does.
package driver

import (
	"slices"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// Defaults returns a copy of o (nil: all defaults) with its zero fields
// filled: what a backend keeps from the Options it is opened with.
func Defaults(o *ledger.Options) ledger.Options {
	var c ledger.Options
	if o != nil {
		c = *o
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.RetryBase <= 0 {
		c.RetryBase = time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Minute
	}
	return c
}

// Backoff is the delay before attempt n+1 after n failed attempts, between
// o.RetryBase and o.RetryMax (o as Defaults returns it).
func Backoff(o ledger.Options, attempts int) time.Duration {
	d := o.RetryBase << min(max(attempts-1, 0), 30)
	if d <= 0 || d > o.RetryMax {
		d = o.RetryMax
	}
	return d
}

// UnixMilli is how backends store times: unix milliseconds, 0 for the zero
// time.
func UnixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// ClaimToken is the fencing token a claim at nowMS (Unix milliseconds, the
// claim's clock, as the record's other times) takes from a record whose
// token is prev: prev+1, except a record's first claim (prev 0: a record
// never claimed, or made again after Ledger.Purge deleted its key's record),
// which takes nowMS (1 if the clock is before 1970). Tokens must never go
// backwards for a key, since a fence at the handler's target keeps the
// highest it has seen; the record that held the key's earlier tokens is
// gone after a purge, so the clock carries them over: its first token was
// its first claim's time and grew by one per claim, so the new record starts
// above them provided the clocks agree within the purge age (at least
// ledger.MinPurgeAge, which Ledger.Purge enforces) and the old record was
// claimed less than once per millisecond on average. A record with a small
// token from before this rule goes on counting by one; its next life starts
// at the clock.
//
// A backend claims with ClaimToken in every path that claims (Claim,
// RecordAndClaim), in one statement or compare-and-swap with the rest of
// the claim, so that concurrent claims stay ordered as before; in SQL:
// token = CASE WHEN token = 0 THEN ClaimToken(0, now) ELSE token + 1 END.
func ClaimToken(prev, nowMS int64) int64 {
	if prev != 0 {
		return prev + 1
	}
	return max(1, nowMS)
}

// VersionToken is ClaimToken for a ledger opened with
// ledger.Options.EveryVersion, where each version of a key is a record of its
// own and a fence at the handler's target still keeps the key's highest
// token: the claim of a record whose token is prev, at nowMS, of a key whose
// records (this one included) hold keyMax as their highest token now, takes
// the larger of ClaimToken(prev, nowMS) and keyMax+1. A version's first claim
// thus starts above every token the key's other versions hold, whatever the
// clocks of the machines that claimed them; only tokens of records purged
// since are carried over by the clock alone (see ClaimToken).
//
// A backend reads keyMax in the claim's own transaction or compare-and-swap,
// where it decides that no other version of the key is claimed or older
// (one version of a key at a time), so that no two versions of a key take
// equal tokens; in SQL, with o the key's rows:
// token = (SELECT CASE WHEN token = 0 AND MAX(o.token) < ClaimToken(0, now)
// THEN ClaimToken(0, now) ELSE MAX(o.token) + 1 END ...).
func VersionToken(prev, keyMax, nowMS int64) int64 {
	return max(ClaimToken(prev, nowMS), keyMax+1)
}

// FromUnixMilli reverses UnixMilli (in UTC).
func FromUnixMilli(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// seqWidth is the fixed width sequencers are padded to for storage, so that
// string order in SQL equals event.CompareSequencer.
const seqWidth = 64

// SortSeq is the stored, comparable form of a sequencer: upper case, right-
// padded with zeros to 64 hex digits. "" stays "" (unordered).
func SortSeq(s string) string {
	if s == "" {
		return ""
	}
	s = strings.ToUpper(s)
	if len(s) < seqWidth {
		s += strings.Repeat("0", seqWidth-len(s))
	}
	return s
}

// Ident is the identity of the work an event belongs to: the key, or with
// everyVersion the key, U+001F and the version id (NUL cannot be stored in
// PostgreSQL text).
func Ident(ev event.Event, everyVersion bool) string {
	if everyVersion && ev.VersionID != "" {
		return ev.Key + "\x1f" + ev.VersionID
	}
	return ev.Key
}

// Decide applies one event to the current row (nil if none) of a ledger
// opened with Options.EveryVersion = everyVersion (the row is the one Ident
// names) and returns the outcome and the row to store (nil if unchanged). It
// is the single place the ledger's acceptance rules live; every backend calls
// it inside its transaction, so all backends decide alike.
//
// Unless everyVersion, a removal of one version (event.Event.VersionOnly, and
// MinIO's DeleteMarkerCreated naming the accepted marker again) is Ignored,
// never taken for the key's removal; when it removed the version the row
// accepted, the row is still returned, its sequencer moved on and its event
// time cleared, so that an audit's resubmission of what the key holds now is
// accepted (see versionRemoved).
func Decide(row *ledger.Record, ev event.Event, source string, now time.Time, everyVersion bool) (ledger.Outcome, *ledger.Record) {
	if ev.Ignorable() {
		return ledger.Ignored, nil
	}
	if !everyVersion && (ev.VersionOnly || markerRemoved(row, ev)) {
		return versionRemoved(row, ev, now)
	}
	if row == nil {
		r := &ledger.Record{Bucket: ev.Bucket, Key: ev.Key, VersionID: ev.VersionID, ETag: ev.ETag, Size: ev.Size, Kind: ev.Kind,
			Name: ev.Name, EventTime: ev.Time, Seq: ev.Sequencer, Status: ledger.Pending, FirstSeen: now, Updated: now, Seen: 1, Source: source, Gen: 1,
			NextAttempt: now, Format: ev.Format, Region: ev.Region, RequestID: ev.RequestID, HostID: ev.HostID}
		return ledger.Accepted, r
	}
	r := *row
	r.Seen++
	r.Updated = now
	accept := func() ledger.Outcome {
		prev := r.Status
		r.VersionID, r.ETag, r.Size, r.Kind, r.Name, r.EventTime, r.Source = ev.VersionID, ev.ETag, ev.Size, ev.Kind, ev.Name, ev.Time, source
		r.Format, r.Region, r.RequestID, r.HostID = ev.Format, ev.Region, ev.RequestID, ev.HostID
		r.LastError = ""
		r.Gen++
		switch r.Status {
		case ledger.Pending:
			// Coalesced: the key keeps its place in the queue (next_at orders
			// pending work first-in, first-out), so a key written again and
			// again is not pushed back for ever.
		case ledger.Claimed:
		default:
			r.Status, r.Attempts, r.NextAttempt = ledger.Pending, 0, now
		}
		if prev == ledger.Pending || prev == ledger.Failed {
			return ledger.Coalesced
		}
		return ledger.Accepted
	}
	switch {
	case ev.Unordered():
		// No sequencer (e.g. an audit resubmission): never overrides a sequenced
		// decision; it only asks for the key to be processed again if what it
		// saw differs from what the ledger accepted, or if the accepted work
		// failed (an explicit resubmission of failed or dead work).
		if ev.ETag != "" && ev.ETag == r.ETag && ev.Kind == r.Kind && r.Status != ledger.Failed && r.Status != ledger.Dead {
			return ledger.Duplicate, &r
		}
		// What it saw is older than the accepted event (the store's own clock
		// on both sides; listings give whole seconds): an event for a newer
		// write already arrived. An audit skips objects younger than its grace
		// period, so a state it saw and a later write are far apart.
		if !ev.Time.IsZero() && !r.EventTime.IsZero() && ev.Time.Before(r.EventTime.Truncate(time.Second)) {
			r.Stale++
			return ledger.Stale, &r
		}
		seq := r.Seq
		out := accept()
		r.Seq = seq
		return out, &r
	case r.Seq == "":
		r.Seq = ev.Sequencer
		if ev.ETag != "" && ev.ETag == r.ETag && ev.Kind == r.Kind && ev.VersionID == r.VersionID {
			// The late real event of a change an audit resubmitted first: the
			// state already accepted. Its sequencer orders the key from now on.
			return ledger.Duplicate, &r
		}
		return accept(), &r
	}
	switch c := event.CompareSequencer(ev.Sequencer, r.Seq); {
	case c == 0:
		return ledger.Duplicate, &r
	case c > 0 && ev.ETag != "" && ev.ETag == r.ETag && ev.Kind == r.Kind && ev.VersionID == r.VersionID:
		// Newer, but the object's state is the one already accepted (an
		// identical re-upload, or the real event of a change an audit
		// resubmitted first): the latest state has not changed.
		r.Seq = ev.Sequencer
		return ledger.Duplicate, &r
	case c < 0:
		r.Stale++
		return ledger.Stale, &r
	default:
		r.Seq = ev.Sequencer
		return accept(), &r
	}
}

// markerRemoved reports a removal that names, with a newer sequencer, the
// very version the ledger accepted as the key's removal: a version id is
// created once, so the same delete marker cannot be placed twice; the second
// event is that marker's deletion, which brings the previous version back.
// MinIO announces deleting a delete marker by its version id so: as
// ObjectRemoved:DeleteMarkerCreated again, with the marker's version id
// (seen on a real MinIO: event.TestMinIOSends). A version id of "null" is
// excluded: a bucket whose versioning is suspended gives every delete marker
// that id.
func markerRemoved(row *ledger.Record, ev event.Event) bool {
	return row != nil && row.Kind == event.Removed && ev.Kind == event.Removed && ev.VersionID != "" && ev.VersionID != "null" &&
		ev.VersionID == row.VersionID && !ev.Unordered() && row.Seq != "" && event.CompareSequencer(ev.Sequencer, row.Seq) > 0
}

// versionRemoved decides, for a ledger whose work is one record per key
// holding its newest state, a removal of one version only
// (event.Event.VersionOnly: a DELETE naming a version id, a lifecycle rule's
// noncurrent expiry). It is never work, and never taken for "the key is
// gone": the version it deleted was noncurrent (a lifecycle rule never
// deletes a current version permanently; a later write made it so), and the
// key's state is unchanged; or it was current, deleted by a request, and the
// previous version (or nothing) is current now, which the event does not say.
// Handing it on as a removal would have a handler delete what mirrors a live
// object; as a creation, send it to read a key that may be gone, with no
// later event to follow. So the outcome is Ignored, and what the key holds now
// is left to an audit (package audit resubmits a key whose listing differs
// from the accepted state, or which is gone).
//
// When it deleted the very version the ledger accepted as the key's state
// (and is newer than it), the row is kept with that knowledge: its sequencer
// moves on (older events stay stale) and its event time is cleared, since
// the accepted state no longer orders the key: an audit's resubmission of
// what the key holds now (an older version become current again, or content
// back after a delete marker was deleted) is accepted whatever the age of
// that object, where it would otherwise be judged older than the accepted
// event.
func versionRemoved(row *ledger.Record, ev event.Event, now time.Time) (ledger.Outcome, *ledger.Record) {
	if row == nil || ev.VersionID != row.VersionID {
		return ledger.Ignored, nil
	}
	if !ev.Unordered() && row.Seq != "" && event.CompareSequencer(ev.Sequencer, row.Seq) <= 0 {
		return ledger.Ignored, nil
	}
	r := *row
	r.Seen++
	r.Updated = now
	if !ev.Unordered() {
		r.Seq = ev.Sequencer
	}
	r.EventTime = time.Time{}
	return ledger.Ignored, &r
}

// SortClaims puts claims in the order Claim and RecordAndClaim return them:
// earliest due (NextAttempt) first; claims due at the same time keep their
// order.
func SortClaims(cs []ledger.Claim) {
	slices.SortStableFunc(cs, func(a, b ledger.Claim) int { return a.NextAttempt.Compare(b.NextAttempt) })
}

// Release is the change Ledger.Release makes to a claimed record r at now:
// its work goes back without counting the attempt (failed if earlier
// attempts failed, else pending), due at once. Work accepted while the claim
// ran (Gen != RunGen) was never attempted: its count starts again.
func Release(r *ledger.Record, now time.Time) {
	counted := r.Gen == r.RunGen
	if r.Attempts > 1 && counted {
		r.Status = ledger.Failed
	} else {
		r.Status = ledger.Pending
	}
	if r.Attempts > 0 && counted {
		r.Attempts--
	} else {
		r.Attempts = 0
	}
	r.LeaseUntil, r.NextAttempt = time.Time{}, now
}

// ErrorClass is the error class a backend that implements
// ledger.ErrorGrouper stores beside a record's last error, whenever it
// writes that error: ledger.ErrorClass of it, or "" for ledger.NoError (the
// class of every record without an error, most of them), so that an empty
// error costs no space. StoredClass maps a class asked for to what is stored.
func ErrorClass(lastError string) string {
	if lastError == "" {
		return ""
	}
	return StoredClass(ledger.ErrorClass(lastError))
}

// StoredClass is what a backend stores for class (as ledger.ErrorClass
// makes it): "" for ledger.NoError, else class itself; ShownClass reverses it.
func StoredClass(class string) string {
	if class == ledger.NoError {
		return ""
	}
	return class
}

// ShownClass is the class a stored one stands for (ledger.NoError for "").
func ShownClass(stored string) string {
	if stored == "" {
		return ledger.NoError
	}
	return stored
}
