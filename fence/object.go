package fence

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/internal/backoff"
	"github.com/cairn-s3/cairn/objstore"
)

// Metadata keys (stored lowercase as user metadata, x-amz-meta-*).
const (
	// MetaToken holds the highest token the key has seen, in decimal.
	MetaToken = "cairn-fence"
	// MetaDeleted marks a tombstone written by Delete.
	MetaDeleted = "cairn-fence-deleted"
	// MetaNonce holds a fresh value per write, to tell after a lost response
	// whether the write landed.
	MetaNonce = "cairn-fence-nonce"
)

// ErrStale: a writer's token is lower than one the sink has already accepted;
// nothing was written. The holder lost its lock to a newer one: stop.
var ErrStale = errors.New("stale fencing token")

// StaleError is the error of a refused write. errors.Is(err, ErrStale) holds.
type StaleError struct {
	Key     string // the object key, document key or row key
	Token   int64  // the refused writer's token
	Highest int64  // the token the sink had recorded; -1 when not known (SQL)
}

func (e *StaleError) Error() string {
	if e.Highest < 0 {
		return fmt.Sprintf("fence: refused the write to %q: fencing token %d is lower than the one already recorded (a newer holder has written it); nothing was written: stop, the work belongs to the newer holder", e.Key, e.Token)
	}
	return fmt.Sprintf("fence: refused the write to %q: fencing token %d is lower than token %d, which has already written it (a newer holder took over); nothing was written: stop, the work belongs to the newer holder", e.Key, e.Token, e.Highest)
}

// Is makes errors.Is(err, ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ErrFenced: a write without a token was refused because the key carries a
// high-water mark (it was written or deleted with a token); nothing was
// written. A plain write would erase the mark and let a stale holder in. Write
// with the holder's token (Put, Update), or without one while keeping the mark
// (PutKeepingMark, UpdateKeepingMark).
var ErrFenced = errors.New("fenced: a write without a fencing token would erase the high-water mark")

// ErrInvalidArgument is the caller's mistake, found before anything is
// sent: a negative token, metadata under the reserved "cairn-fence" prefix,
// a document value that holds DocField at its top level without a mark, a
// SQL name that is not a plain identifier. Fix the call: sending it again
// cannot succeed. (What the store cannot do is objstore.ErrNotSupported.)
var ErrInvalidArgument = errors.New("invalid argument")

// FencedError is the error of a refused write without a token.
// errors.Is(err, ErrFenced) holds.
type FencedError struct {
	Key      string // the object or document key
	Highest  int64  // the mark: the highest token the key has recorded
	Deleted  bool   // the object is a tombstone written by Delete
	Document bool   // the key holds a fenced document (written by Update)
}

func (e *FencedError) Error() string {
	what := "is fenced"
	switch {
	case e.Deleted:
		what = "was deleted by a fenced writer"
	case e.Document:
		what = "is a fenced document"
	}
	return fmt.Sprintf("fence: %q %s (highest token %d): a write without a token would erase that mark and let a stale holder in; nothing was written: write with the holder's token (fence.Put, fence.Update), or keep the mark (fence.PutKeepingMark, fence.UpdateKeepingMark)", e.Key, what, e.Highest)
}

// Is makes errors.Is(err, ErrFenced) hold.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// CheckUnfenced returns nil if the object described by info carries no mark
// (it was never written or deleted through this package), and a *FencedError
// (ErrFenced) if it does. A writer that passes no token calls it on the Info
// it read and then writes conditionally on that Info's ETag (If-None-Match: *
// when the key was missing), so that a fenced write landing in between is
// never overwritten: see "Writers without a token" in the package doc.
func CheckUnfenced(key string, info objstore.Info) error {
	tok, del := TokenOf(info)
	if tok < 0 && !del {
		return nil
	}
	return &FencedError{Key: key, Highest: max(tok, 0), Deleted: del}
}

// CheckUnfencedAt is CheckUnfenced for a writer that may meet a fenced
// document too: a document's mark is in its body ({"cairn_fence": N, …} as
// Update stores it), which an object's Info does not show, so it reads the
// body of an object stored as JSON (application/json, as package docstore
// writes documents). It returns a *FencedError (ErrFenced) for a fenced
// object, tombstone or document, and an error wrapping
// objstore.ErrPreconditionFailed if the object changed since info was read
// (read it again and call again).
func CheckUnfencedAt(ctx context.Context, s *objstore.Store, key string, info objstore.Info) error {
	if err := CheckUnfenced(key, info); err != nil {
		return err
	}
	tok, err := documentMark(ctx, s, key, info)
	if err != nil || tok < 0 {
		return err
	}
	return &FencedError{Key: key, Highest: tok, Document: true}
}

// docPrefix is how every document package docstore stores begins (its
// envelope, whose first field is the format).
const docPrefix = `{"cairn_doc":`

// errChanged: the object read is not the version a HEAD described.
var errChanged = fmt.Errorf("fence: the object changed while it was read: %w", objstore.ErrPreconditionFailed)

// documentMark returns the mark of a fenced document at key, whose HEAD gave
// info: -1 if it is not one (not a document, no wrapper, or gone since). Only
// an object stored as application/json is read, and of one that is not a
// docstore document (its body does not begin as theirs does) only that
// beginning, so a large JSON file is not downloaded. errChanged if what it
// read is not the version info describes.
func documentMark(ctx context.Context, s *objstore.Store, key string, info objstore.Info) (int64, error) {
	if ct, _, _ := strings.Cut(info.ContentType, ";"); !strings.EqualFold(strings.TrimSpace(ct), "application/json") {
		return -1, nil
	}
	rc, ginfo, err := s.Get(ctx, key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return -1, errChanged
	case err != nil:
		return -1, err
	}
	head := make([]byte, len(docPrefix))
	n, _ := io.ReadFull(rc, head)
	rc.Close()
	if ginfo.ETag != info.ETag {
		return -1, errChanged
	}
	if string(head[:n]) != docPrefix {
		return -1, nil
	}
	value, m, err := docstore.New(s, &docstore.Options{Strategy: docstore.CAS}).LoadBytes(ctx, key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return -1, errChanged
	case err != nil:
		return -1, err
	case m.ETag != info.ETag:
		return -1, errChanged
	}
	_, tok, err := split(value)
	if err != nil {
		return -1, nil // not a wrapper this package wrote
	}
	return tok, nil
}

// Options tune Put and Delete. A nil *Options means all defaults.
type Options struct {
	// ContentType of the object. Default: application/octet-stream.
	ContentType string
	// Metadata is further user metadata stored with the object; keys starting
	// with "cairn-fence" are refused. Default: none.
	Metadata map[string]string
	// MaxAttempts bounds the reads and writes of one call under contention
	// (412/409 from concurrent writers). Default: 20.
	MaxAttempts int
	// PartSize is passed to objstore.Store.Upload. Default: Upload's.
	PartSize int64
}

// Meta describes a fenced object as read.
type Meta struct {
	objstore.Info
	// Token is the highest token recorded (-1 if the object carries none).
	Token int64
	// Deleted: the object is a tombstone written by Delete.
	Deleted bool
}

// TokenOf returns the token recorded in an object's metadata (-1 if none)
// and whether the object is a tombstone.
func TokenOf(info objstore.Info) (token int64, deleted bool) {
	token = -1
	if v, ok := info.Metadata[MetaToken]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			token = n
		}
	}
	_, deleted = info.Metadata[MetaDeleted]
	return token, deleted
}

// Get reads a fenced object. A tombstone is objstore.ErrNotFound. An object
// written without fencing has Token -1.
func Get(ctx context.Context, s *objstore.Store, key string) ([]byte, Meta, error) {
	data, info, err := s.GetBytes(ctx, key)
	if err != nil {
		return nil, Meta{}, err
	}
	tok, del := TokenOf(info)
	m := Meta{Info: info, Token: tok, Deleted: del}
	if del {
		return nil, m, fmt.Errorf("fence: %q was deleted (by token %d): %w", key, tok, objstore.ErrNotFound)
	}
	return data, m, nil
}

// Token returns the highest token key has recorded, tombstones included; -1
// if the key is missing or carries no token.
func Token(ctx context.Context, s *objstore.Store, key string) (int64, error) {
	info, err := s.Head(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	tok, _ := TokenOf(info)
	return tok, nil
}

// Put writes body at key if token is at least the highest token key has
// seen (see the package doc), recording token with the object. A lower token
// gets a *StaleError (ErrStale) and writes nothing. body is read from its
// start on every attempt.
func Put(ctx context.Context, s *objstore.Store, key string, body io.ReadSeeker, token int64, opts *Options) (objstore.Info, error) {
	return write(ctx, s, key, body, token, opts, modePut)
}

// PutKeepingMark writes body at key without a token, carrying forward the
// mark the key has (the highest token recorded, a tombstone's included), so
// that a holder whose token is below it is still refused afterwards. A key
// without a mark stays without one. Like Put, it judges the version it read
// and writes with If-Match on its ETag (If-None-Match: * for a missing key),
// re-reading on a 412 or 409, so a fenced write that lands in between is
// never overwritten with a lower mark; a lost response is settled the same
// way. It is for writers that hold no lock (an operator, a repair job):
// it refuses no one, so it can overwrite a current holder's output.
func PutKeepingMark(ctx context.Context, s *objstore.Store, key string, body io.ReadSeeker, opts *Options) (objstore.Info, error) {
	return write(ctx, s, key, body, -1, opts, modeKeep)
}

// PutBytes is Put for a body in memory.
func PutBytes(ctx context.Context, s *objstore.Store, key string, body []byte, token int64, opts *Options) (objstore.Info, error) {
	return Put(ctx, s, key, bytes.NewReader(body), token, opts)
}

// Delete deletes key for readers of this package, if token is at least the
// highest token key has seen: it writes a tombstone that keeps the token (a
// removed object would let a stale writer create it again). Deleting a
// missing key writes a tombstone too. A lower token gets ErrStale.
func Delete(ctx context.Context, s *objstore.Store, key string, token int64, opts *Options) error {
	_, err := write(ctx, s, key, nil, token, opts, modeDelete)
	return err
}

// mode is what write does.
type mode int

const (
	modePut    mode = iota // judge token, record it
	modeDelete             // judge token, record it in a tombstone
	modeKeep               // no token: carry forward the mark read
)

// sent is a write whose outcome is not known.
type sent struct {
	nonce string
	cond  objstore.Condition
	mark  int64 // the token it records; -1: none
}

// write is Put, Delete and PutKeepingMark: it reads the object's Info
// (HEAD), judges its token and writes with If-Match on the ETag it read
// (If-None-Match: * when the key is missing). The condition is what makes
// the judgement hold at the moment of the write: two writers can never both
// pass, and a writer that read token 3 cannot land after a writer with
// token 5 has replaced what it read (but see Limits). A 412 or 409 re-reads
// and judges again. Delete does not remove the object, which would forget
// the token and let a stale writer recreate it: it writes a tombstone
// conditionally, a short body that is unique per write with metadata
// "cairn-fence-deleted", which Get reads as not found and Token still reads
// the token of.
//
// Lost responses and requests that land late: a conditional write whose
// response was lost (objstore.ErrAmbiguous) may have been applied, may
// never be, or may land later, after the client has given up. For fencing
// this is harmless in one direction and must be resolved in the other.
// Harmless: a write conditional on ETag X can land only while the object's
// ETag is X; a write with a higher token that was accepted after it changed
// the ETag, so the late write can never overwrite a higher token's write —
// it fails 412 on arrival. To be resolved: whether our own write landed.
// Every fenced write carries a fresh nonce in its metadata
// ("cairn-fence-nonce"); after an ambiguous write Put reads back: its nonce
// means it landed (success); the object still at the ETag it was
// conditional on means it may yet land, so Put sends the same write on the
// same condition again (at most one of the two can land); anything else
// means it was replaced or never will land, and Put returns
// objstore.ErrAmbiguous (run the effect again: the token still decides).
// Documents inherit the docstore package's resolution of ambiguous writes.
func write(ctx context.Context, s *objstore.Store, key string, body io.ReadSeeker, token int64, opts *Options, m mode) (objstore.Info, error) {
	del := m == modeDelete
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 20
	}
	if token < 0 && m != modeKeep {
		return objstore.Info{}, fmt.Errorf("fence: token %d for %q is negative; pass the token your lock handed out: %w", token, key, ErrInvalidArgument)
	}
	for k := range o.Metadata {
		if strings.HasPrefix(strings.ToLower(k), MetaToken) {
			return objstore.Info{}, fmt.Errorf("fence: metadata key %q is reserved for fencing; rename it: %w", k, ErrInvalidArgument)
		}
	}
	caps, err := s.Capabilities(ctx)
	if err != nil {
		return objstore.Info{}, fmt.Errorf("fence: cannot tell whether %s enforces conditional writes, so nothing was written: %w", s, err)
	}
	if !caps.ConditionalWrites() {
		if m == modeKeep {
			return objstore.Info{}, fmt.Errorf("fence: %s does not enforce conditional PUTs (If-None-Match and If-Match), so no object there carries a fencing mark to keep (fenced writes are refused there) and a write keeping one cannot be made; nothing was written: write without keeping a mark (without --unfenced) (run `cairn probe` to see what it enforces): %w", s, objstore.ErrNotSupported)
		}
		return objstore.Info{}, fmt.Errorf("fence: %s does not enforce conditional PUTs (If-None-Match and If-Match), so a stale writer could not be refused; nothing was written (run `cairn probe` to see what it enforces): %w", s, objstore.ErrNotSupported)
	}
	var pending []sent // writes that may still land
	var resend *sent
	refused := 0 // creates refused although the key read as absent
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return objstore.Info{}, ambiguousIf(pending, err)
		}
		if attempt >= o.MaxAttempts {
			return objstore.Info{}, ambiguousIf(pending, fmt.Errorf("fence: gave up on %q after %d attempts under concurrent writes; retry later: %w", key, attempt, objstore.ErrConflict))
		}
		info, herr := s.Head(ctx, key)
		if herr != nil && !errors.Is(herr, objstore.ErrNotFound) {
			if permanent(herr) {
				return objstore.Info{}, ambiguousIf(pending, herr)
			}
			if err := retryWait.Wait(ctx, attempt); err != nil {
				return objstore.Info{}, ambiguousIf(pending, err)
			}
			continue
		}
		// Did one of our writes land, or can one still land?
		resend = nil
		if herr == nil {
			for i := range pending {
				if n := info.Metadata[MetaNonce]; n != "" && n == pending[i].nonce {
					return info, nil
				}
			}
		}
		still := pending[:0]
		for _, p := range pending {
			if (p.cond.Absent && herr != nil) || (p.cond.Match != "" && herr == nil && p.cond.Match == info.ETag) {
				still = append(still, p)
			}
		}
		if len(still) < len(pending) {
			// A write we sent can no longer land, and it is not there now: it
			// never landed, or it landed and was replaced. We cannot tell.
			return objstore.Info{}, fmt.Errorf("fence: the write to %q may have landed and been replaced since (its response was lost); run the effect again, the token still decides: %w", key, objstore.ErrAmbiguous)
		}
		pending = still
		if len(pending) > 0 {
			resend = &pending[0]
		}
		var cond objstore.Condition
		mark := token
		if herr != nil {
			cond = objstore.IfAbsent()
			if m == modeKeep {
				mark = -1 // nothing to carry forward
			}
		} else {
			have, del := TokenOf(info)
			if have < 0 && !del {
				// A fenced document keeps its mark in its body: an object
				// written over it carries the mark on (and is judged by it).
				dm, err := documentMark(ctx, s, key, info)
				if errors.Is(err, errChanged) {
					continue
				}
				if err != nil {
					return objstore.Info{}, ambiguousIf(pending, err)
				}
				have = dm
			}
			if m == modeKeep {
				mark = have
			} else if token < have {
				return objstore.Info{}, &StaleError{Key: key, Token: token, Highest: have}
			}
			cond = objstore.IfMatch(info.ETag)
		}
		nonce := newNonce()
		if resend != nil {
			nonce, cond, mark = resend.nonce, resend.cond, resend.mark
		}
		md := map[string]string{MetaNonce: nonce}
		if mark >= 0 {
			md[MetaToken] = strconv.FormatInt(mark, 10)
		}
		for k, v := range o.Metadata {
			md[k] = v
		}
		var r io.Reader
		ct := o.ContentType
		if del {
			md[MetaDeleted] = "1"
			// Unique bytes: a tombstone's ETag never comes back (no ABA).
			r = bytes.NewReader([]byte("cairn-fence tombstone token=" + strconv.FormatInt(token, 10) + " nonce=" + nonce + "\n"))
			ct = "text/plain"
		} else {
			if _, err := body.Seek(0, io.SeekStart); err != nil {
				return objstore.Info{}, fmt.Errorf("fence: rewinding the body for %q: %w", key, err)
			}
			r = body
		}
		winfo, werr := s.Upload(ctx, key, r, &objstore.UploadOptions{PutOptions: objstore.PutOptions{If: cond, ContentType: ct, Metadata: md}, PartSize: o.PartSize})
		switch {
		case werr == nil:
			return winfo, nil
		case errors.Is(werr, objstore.ErrAmbiguous):
			if resend == nil {
				pending = append(pending, sent{nonce: nonce, cond: cond, mark: mark})
			}
		case errors.Is(werr, objstore.ErrCreateRefused):
			// Refused although the key read as absent: nobody wrote first. Read
			// again a few times (it may have been created and deleted), then
			// say so rather than blame concurrent writers.
			if refused++; refused >= 3 {
				return objstore.Info{}, ambiguousIf(pending, werr)
			}
		case errors.Is(werr, objstore.ErrPreconditionFailed):
			// Someone wrote first: read and judge again.
		case errors.Is(werr, objstore.ErrConflict):
			if err := retryWait.Wait(ctx, attempt); err != nil {
				return objstore.Info{}, ambiguousIf(pending, err)
			}
		case permanent(werr):
			return objstore.Info{}, ambiguousIf(pending, werr)
		default: // a failure that applied nothing: try again
			if err := retryWait.Wait(ctx, attempt); err != nil {
				return objstore.Info{}, ambiguousIf(pending, err)
			}
		}
	}
}

func ambiguousIf(pending []sent, err error) error {
	if len(pending) == 0 {
		return err
	}
	return fmt.Errorf("%w (and an earlier write's response was lost: %w)", err, objstore.ErrAmbiguous)
}

// permanent reports errors that retrying cannot fix.
func permanent(err error) bool {
	return errors.Is(err, objstore.ErrNotSupported) || errors.Is(err, objstore.ErrInvalidKey) ||
		errors.Is(err, objstore.ErrBucketNotFound) || errors.Is(err, objstore.ErrUnwritable) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// retryWait spaces the attempts of a fenced write under contention: full
// jitter from 1ms, doubling up to 256ms.
var retryWait = backoff.Policy{Base: time.Millisecond, Max: 256 * time.Millisecond}

func newNonce() string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
