package objstore

import (
	"errors"
	"fmt"

	"github.com/cairn-s3/cairn"
)

// Sentinel errors. Test for them with errors.Is; the concrete error carries the
// operation, the key and the backend's own message. ErrNotFound is also
// cairn.ErrNotFound.
var (
	// ErrNotFound: the object (or the multipart upload) does not exist.
	ErrNotFound = cairn.Sentinel(cairn.ErrNotFound, "not found")
	// ErrPreconditionFailed: the write's condition did not hold (HTTP 412); nothing
	// was written. Re-read the object and decide again.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrConflict: a concurrent conditional write to the same key was in flight
	// (HTTP 409); nothing was written. Retry after a short backoff.
	ErrConflict = errors.New("conflicting concurrent write")
	// ErrNotSupported: the store cannot perform the operation, or does not enforce
	// the requested condition (see Probe).
	ErrNotSupported = errors.New("not supported by this store")
	// ErrInvalidKey: the key breaks the portable key rules in the package doc, or
	// the backend cannot store it (e.g. the fs backend cannot hold both "a/b" and
	// "a/b/c").
	ErrInvalidKey = errors.New("invalid key")
	// ErrAmbiguous: a write failed after the request may have reached the server;
	// it may or may not have been applied. Read back to find out.
	ErrAmbiguous = errors.New("outcome unknown (the write may have been applied)")
	// ErrBucketNotFound: the bucket (or the fs root directory) does not exist.
	ErrBucketNotFound = errors.New("bucket not found")
	// ErrCreateRefused: a write-once create (IfAbsent) was refused with 412
	// although the key reads as absent right after, so no other writer holds
	// it (SeaweedFS refuses a key whose name is, or was, also a folder).
	// Nothing was written. It is not ErrPreconditionFailed: retrying, or
	// waiting for a holder, cannot help.
	ErrCreateRefused = errors.New("create refused")

	// ErrUnwritable: the store takes no writes until someone acts on it: its
	// disk is full or a quota is used up (ENOSPC, EDQUOT; HTTP 507 from an
	// S3 server), or it is read-only (EROFS). Nothing was written. Retrying
	// cannot help, so cairn's retry loops give up at once; the message says
	// what to free or fix.
	ErrUnwritable = errors.New("the store takes no writes")
)

// createRefusedError is ErrCreateRefused for one key. It does not unwrap to
// the server's 412 (which would make it ErrPreconditionFailed); Detail keeps
// the raw answer.
type createRefusedError struct {
	key   string
	cause error
}

func (e *createRefusedError) Error() string {
	return fmt.Sprintf("%v: the store refused to create %q although it reads as absent, so no other writer holds it; "+
		"some servers refuse a key whose name is also a folder, or was one (SeaweedFS, while or after objects exist under %q): use another key",
		ErrCreateRefused, e.key, e.key+"/")
}

func (e *createRefusedError) Is(target error) bool { return target == ErrCreateRefused }

// Detail is the server's refusal (see Detail).
func (e *createRefusedError) Detail() string {
	if d := Detail(e.cause); d != "" {
		return d
	}
	return e.cause.Error()
}

// Error is the error type returned by Store methods.
type Error struct {
	Op  string // "get", "put", "list", …
	Key string // the key involved, if any
	Err error  // wraps one or more sentinels and the backend's cause
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("objstore: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("objstore: %s %q: %v", e.Op, e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func wrapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var oe *Error
	if errors.As(err, &oe) {
		return err
	}
	return &Error{Op: op, Key: key, Err: err}
}

// Detail returns the backend's raw error chain behind err (for S3: the SDK's
// operation, request and host ids, retry attempts), which err's own message
// leaves out to stay readable; "" if err carries none. Log it at debug level.
func Detail(err error) string {
	var d interface{ Detail() string }
	if errors.As(err, &d) {
		return d.Detail()
	}
	return ""
}
