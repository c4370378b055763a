// Package event parses the object-change notifications users receive from S3
// and S3-compatible servers into one normalised Event, and orders events of one
// key by their sequencer.
//
// Shapes understood (several records per message are fine, and envelopes nest):
//   - S3 notifications: {"Records":[…]} as put on SQS or passed to Lambda;
//   - Lambda's SQS batch: {"Records":[{"body":"<S3 notification>"}…]};
//   - SNS: {"Type":"Notification","Message":"<S3 notification>"} and Lambda's
//     {"Records":[{"Sns":{"Message":…}}]};
//   - EventBridge: {"source":"aws.s3","detail-type":"Object Created"|"Object
//     Deleted",…,"detail":{"object":{…}}};
//   - MinIO webhook bodies: {"EventName","Key","Records":[…]} (event names
//     with an "s3:" prefix, keys with "/" sent as %2F, ObjectRemoved:NoOP);
//   - s3:TestEvent, recognised and marked Test so it can be ignored.
//
// # Kinds
//
// Every event name AWS S3 and MinIO document is classified deliberately:
// Created when content was written (ObjectCreated:Put, Post, Copy,
// CompleteMultipartUpload; EventBridge "Object Created"), Removed when
// content went away by a request or a lifecycle rule (ObjectRemoved:Delete,
// DeleteMarkerCreated, MinIO's DeleteAllVersions,
// LifecycleExpiration:Delete and DeleteMarkerCreated, MinIO's
// LifecycleDelMarkerExpiration:Delete; "Object Deleted" whatever its reason),
// and Other when the content is unchanged or there is no object: restores,
// storage class and tier transitions, replication status, tags, ACLs,
// annotations, MinIO's metadata-only ObjectCreated:PutTagging,
// DeleteTagging, PutRetention and PutLegalHold, its reads, scanner warnings,
// bucket events and ObjectRemoved:NoOP. Other and Test events are
// Ignorable; they may lack a key (bucket events) or a bucket.
//
// Keys in S3, SNS and MinIO records are form-URL-encoded ("+" for space) and are
// decoded; EventBridge keys arrive as they are. The AWS schema comes from
// github.com/aws/aws-lambda-go/events rather than being declared again here.
//
// # Versions
//
// In a versioned bucket a removal means one of two things, and the two must
// not be confused. A DELETE without a version id (or a lifecycle rule expiring
// the current version) places a delete marker: the key reads as absent
// (ObjectRemoved:DeleteMarkerCreated, LifecycleExpiration:DeleteMarkerCreated,
// "Object Deleted" with deletion-type "Delete Marker Created"). A DELETE with a
// version id, and a lifecycle rule expiring noncurrent versions, permanently
// deletes that one version and nothing else (ObjectRemoved:Delete or
// LifecycleExpiration:Delete naming a version, "Object Deleted" with
// "Permanently Deleted" and a version-id): the key's current state is
// unchanged when the version was noncurrent (a lifecycle rule never deletes a
// current version permanently), and when it was current the previous version
// (or nothing) becomes current — deleting a delete marker even brings the
// content back. Such an event is Removed with VersionOnly set: the version is
// gone, the key may not be. A version id of "null" is not taken for a version
// (unversioned buckets may send it for plain deletes), so such removals stay
// removals of the key. MinIO announces the deletion of a delete marker by its
// version id as ObjectRemoved:DeleteMarkerCreated again, with the marker's
// version id, which one event alone cannot tell from the marker's creation;
// a ledger can (it has seen that version id already: see package
// ledger/driver). Package ledger hands a VersionOnly removal on only when
// it keeps work per version (Options.EveryVersion); by default, where work is
// one record per key holding its newest state, it is Ignored and an audit finds
// a key whose current state it changed.
//
// # Ordering
//
// CompareSequencer orders two events of the SAME key: sequencers are hex
// strings; the shorter is right-padded with zeros, then they compare as
// case-insensitive strings (the S3 User Guide's rule; left-padding, as some
// articles advise, misorders sequencers of different lengths). Sequencers of
// different keys mean nothing relative to each other. MinIO's sequencer is the
// server's wall-clock time in nanoseconds (hex), not a per-key counter: it
// orders the writes one MinIO server saw for a key as its clock saw them, so
// two writes to one key within the clock's resolution, or on servers whose
// clocks disagree, may tie or misorder. Events without a sequencer (audit
// resubmissions, some replays) are Unordered: the ledger never lets them
// override a sequenced decision.
//
// # Errors
//
// Parse returns a *ParseError (errors.As) naming the field at fault, which
// wraps one of these (errors.Is):
//
//   - ErrMalformed: the message, or one of its records, is not valid for its
//     shape: a field missing or of the wrong type, a key that does not
//     decode, no records at all, or a record that breaks the limits below.
//     Parsing it again will not help.
//   - ErrUnknownFormat: no shape fits — not a JSON object, or not an S3,
//     SNS, SQS, EventBridge or MinIO notification (an SNS subscription
//     confirmation, say).
//   - ErrUnknownEventType: an event name cairn does not know (every name AWS
//     S3 and MinIO document is known, see Kinds above; an unknown
//     ObjectRemoved name is refused, since it cannot be told whether content
//     went away), or an EventBridge detail-type outside S3's list.
//
// Event.Validate returns a *ParseError wrapping ErrMalformed too (ValidateKey
// and ValidateBucket return a plain error saying what is wrong). ParseAll
// keeps the good records of a message with bad ones and names each bad one.
// Every record is held to the limits of Validate (bucket name, key of 1 to
// 1,024 bytes of UTF-8 without NUL — control characters are fine — and a hex
// sequencer). Arbitrary input never panics (fuzzed).
package event

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind is what happened to the object.
type Kind string

// The kinds of event.
const (
	Created Kind = "created" // ObjectCreated:Put, Post, Copy, CompleteMultipartUpload / "Object Created"
	Removed Kind = "removed" // ObjectRemoved:*, LifecycleExpiration:* (not NoOP) / "Object Deleted" (any reason); see VersionOnly
	Test    Kind = "test"    // s3:TestEvent: ignore
	Other   Kind = "other"   // restores, transitions, replication, tags, ACLs, reads, bucket events, NoOP: ignore
)

// Format names the shape an event arrived in.
type Format string

// The formats.
const (
	FormatS3          Format = "s3"
	FormatSNS         Format = "sns"
	FormatEventBridge Format = "eventbridge"
	FormatMinIO       Format = "minio"
	FormatSQS         Format = "sqs" // Lambda's SQS batch
	FormatAudit       Format = "audit"
)

// Event is one normalised object change.
type Event struct {
	Bucket    string    `json:"bucket"`
	Key       string    `json:"key"` // decoded
	VersionID string    `json:"version_id,omitempty"`
	ETag      string    `json:"etag,omitempty"`
	Size      int64     `json:"size"`
	Sequencer string    `json:"sequencer,omitempty"` // upper-case hex, as sent
	Kind      Kind      `json:"kind"`
	Name      string    `json:"name"` // e.g. "ObjectCreated:Put" (no "s3:" prefix)
	Time      time.Time `json:"time,omitzero"`
	RequestID string    `json:"request_id,omitempty"`
	HostID    string    `json:"host_id,omitempty"`
	Region    string    `json:"region,omitempty"`
	Format    Format    `json:"format"`
	// VersionOnly marks a Removed event that permanently deleted the one
	// version VersionID names, not the key: another version of the key may
	// still be current. See Versions in the package doc.
	VersionOnly bool `json:"version_only,omitempty"`
}

// AuditPrefix begins the name of every event an audit resubmits (package
// audit): "cairn:Audit:" and the reason, one of Missing (no record: the event
// was lost), Changed (the object differs from the accepted state), Failed and
// Dead (resubmitted on request) and Gone (deleted without a removal event).
// Such events carry no sequencer — S3 never numbered the change they announce —
// and a handler must not deduplicate them by (key, sequencer) against earlier
// events; their Kind is still Created or Removed.
const AuditPrefix = "cairn:Audit:"

// IsAudit reports an audit resubmission's event name (see AuditPrefix).
func IsAudit(name string) bool { return strings.HasPrefix(name, AuditPrefix) }

// Ignorable reports events that carry no work: test events and the rest of
// the Other kind (e.g. MinIO's ObjectRemoved:NoOP for a key that never existed).
func (e Event) Ignorable() bool { return e.Kind == Test || e.Kind == Other }

// Unordered reports an event without a sequencer.
func (e Event) Unordered() bool { return e.Sequencer == "" }

// Sentinel errors, wrapped by *ParseError.
var (
	ErrMalformed        = errors.New("malformed event")
	ErrUnknownFormat    = errors.New("unknown event format")
	ErrUnknownEventType = errors.New("unknown event type")
)

// ParseError says which field of which message was wrong.
type ParseError struct {
	Field string // a path such as "Records[2].s3.object.key"
	Err   error  // wraps ErrMalformed, ErrUnknownFormat or ErrUnknownEventType
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return "event: " + e.Err.Error()
	}
	return fmt.Sprintf("event: %s: %v", e.Field, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

func malformed(field, format string, a ...any) error {
	return &ParseError{Field: field, Err: fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, a...)...)}
}

// CompareSequencer orders two sequencers of the same key: -1, 0 or +1. The
// shorter is right-padded with zeros; comparison ignores case.
func CompareSequencer(a, b string) int {
	a, b = strings.ToUpper(a), strings.ToUpper(b)
	if n := max(len(a), len(b)); len(a) < n {
		a += strings.Repeat("0", n-len(a))
	} else if len(b) < n {
		b += strings.Repeat("0", n-len(b))
	}
	return strings.Compare(a, b)
}

// NormalizeSequencer returns the canonical form used for storage and equality:
// upper case, trailing zeros removed (so "0A10" and "0A1" are the same point,
// as CompareSequencer says).
func NormalizeSequencer(s string) string {
	return strings.TrimRight(strings.ToUpper(s), "0")
}

// The limits every event is held to before it reaches a ledger, whatever its
// source: what S3 allows, less what no real object has and every backend
// cannot store alike.
const (
	MaxKeyLen       = 1024 // bytes, S3's limit
	MaxSequencerLen = 64   // hex digits (S3's are 16 to 20)
	MaxBucketLen    = 255  // legacy us-east-1 names; current rules say 63
)

func validSequencer(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return len(s) <= MaxSequencerLen
}

// ValidateKey checks an object key against the limits cairn holds events to:
// 1 to MaxKeyLen bytes of valid UTF-8 without NUL. That is every key S3 can
// store and announce: control characters (newline, tab, ESC, DEL, C1) are
// accepted and kept byte-exact, as are spaces, "+", "%", "..", "//", a
// leading "/" and any other Unicode. Text output escapes them; JSON carries
// them exactly.
//
// NUL alone is refused, because no object carrying it can travel the way
// cairn hands work on: S3's XML listings cannot represent U+0000, MinIO
// refuses such keys, PostgreSQL text cannot store it, and a process
// environment (CAIRN_KEY for an exec handler) cannot carry it.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%d bytes long; the limit is %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return errors.New("not valid UTF-8")
	}
	if i := strings.IndexByte(key, 0); i >= 0 {
		return fmt.Errorf("NUL at byte %d: no S3 listing, PostgreSQL ledger or handler environment can carry it, so no object with this key can be processed", i)
	}
	return nil
}

// ValidateBucket checks a bucket name: 1 to MaxBucketLen characters of
// letters, digits, ".", "-" and "_" (S3's current rules and its legacy
// us-east-1 names, MinIO's and the other servers' all fit).
func ValidateBucket(name string) error {
	if name == "" {
		return errors.New("empty")
	}
	if len(name) > MaxBucketLen {
		return fmt.Errorf("%d characters long; the limit is %d", len(name), MaxBucketLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("%q is not a bucket name (character %q at %d)", truncate(name, 80), c, i)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Validate checks an event's bucket, key and sequencer against the limits
// above, so that no ledger backend sees what another would store differently
// or refuse. It returns a *ParseError naming the field ("bucket", "key" or
// "sequencer") wrapping ErrMalformed. Parse validates every record; call it
// for events built by other means before submitting them.
//
// An Ignorable event (Test or Other) need not name an object: MinIO's bucket
// events carry no key, S3's test event no object. What it does carry is held
// to the same limits.
func (e Event) Validate() error { return e.validate("", "bucket", "key", "sequencer") }

func (e Event) validate(path, bucketField, keyField, seqField string) error {
	if err := ValidateBucket(e.Bucket); err != nil && !(e.Ignorable() && e.Bucket == "") {
		return malformed(join(path, bucketField), "%v", err)
	}
	if err := ValidateKey(e.Key); err != nil && !(e.Ignorable() && e.Key == "") {
		return malformed(join(path, keyField), "%v", err)
	}
	if !validSequencer(e.Sequencer) {
		return malformed(join(path, seqField), "%q is not a hex sequencer of at most %d digits", truncate(e.Sequencer, 80), MaxSequencerLen)
	}
	return nil
}

// kinds classifies every event name AWS S3 (event versions 2.1 to 2.3, and
// the API's current list) and MinIO (its internal/event names) send, without
// the "s3:" prefix. An event is a change (Created, Removed) when the object's
// content at its key appeared, was replaced or went away; the rest is Other:
// the content is unchanged, or there is no object at all. Names are listed
// exactly; families are in kindFamilies. TestEventNames names each one and why.
var kinds = map[string]Kind{
	// Content written: every creation API of S3 and MinIO.
	"ObjectCreated:Put": Created, "ObjectCreated:Post": Created, "ObjectCreated:Copy": Created,
	"ObjectCreated:CompleteMultipartUpload": Created,
	// MinIO files metadata-only updates under ObjectCreated. The content is
	// unchanged, and PutObjectTagging/Retention/LegalHold take a versionId: the
	// event can name a noncurrent version with a fresh sequencer (MinIO's is
	// the time of the event), which as a change would make the ledger accept an
	// old version as the key's state. The write that made the content has its
	// own event; an audit finds an object whose event was lost.
	"ObjectCreated:PutTagging": Other, "ObjectCreated:DeleteTagging": Other,
	"ObjectCreated:PutRetention": Other, "ObjectCreated:PutLegalHold": Other,
	// Content gone from the key: a version deleted or a delete marker placed,
	// by a request or by a lifecycle rule (S3 sends LifecycleExpiration:*,
	// never ObjectRemoved:*, for those; MinIO sends ObjectRemoved:* and, for
	// rules that drop every version, DeleteAllVersions and
	// LifecycleDelMarkerExpiration:Delete). Like S3's ObjectRemoved:Delete of
	// one version, each is handed on: a removal handler is idempotent.
	"ObjectRemoved:Delete": Removed, "ObjectRemoved:DeleteMarkerCreated": Removed,
	"ObjectRemoved:DeleteAllVersions": Removed,
	"LifecycleExpiration:Delete":      Removed, "LifecycleExpiration:DeleteMarkerCreated": Removed,
	"LifecycleDelMarkerExpiration:Delete": Removed,
	// MinIO's delete of a key that did not exist: nothing changed.
	"ObjectRemoved:NoOP": Other,
	// Subscription wildcards, as hand-written senders use them.
	"ObjectCreated:*": Created, "ObjectRemoved:*": Removed, "LifecycleExpiration:*": Removed,
	"TestEvent": Test,
}

// kindFamilies classify the other names of a family, by the part before the
// first ":". None of them changes an object's content: restores (a temporary
// copy of an archived object), storage class and access tier transitions
// (S3 lifecycle and Intelligent-Tiering, MinIO's ObjectTransition), lost
// Reduced Redundancy data (the key still lists; an overwrite restores it),
// replication status on the source (a replica's own writes are announced by
// the destination bucket), tags, ACLs and annotations, MinIO's reads
// (ObjectAccessed) and scanner warnings (Scanner:ManyVersions, LargeVersions,
// BigPrefix), and MinIO's bucket events (no object at all). A name outside
// every family and the list above is ErrUnknownEventType, and so is an
// unknown ObjectRemoved name (it cannot be told whether content went away).
// An unknown ObjectCreated name is Created: every creation S3 announces is
// one, and a handler run for unchanged content is a Duplicate in the ledger.
var kindFamilies = map[string]Kind{
	"ObjectCreated": Created,
	"ObjectRestore": Other, "LifecycleTransition": Other, "IntelligentTiering": Other, "ObjectTransition": Other,
	"ReducedRedundancyLostObject": Other, "Replication": Other, "ObjectTagging": Other, "ObjectAcl": Other,
	"ObjectAnnotation": Other, "ObjectAccessed": Other, "Scanner": Other, "BucketCreated": Other, "BucketRemoved": Other,
}

// versionOnly reports a removal, by its name and version id, that
// permanently deleted one version rather than the key (see Versions in the
// package doc): S3's and MinIO's ObjectRemoved:Delete and S3's
// LifecycleExpiration:Delete naming a version (MinIO sends its noncurrent
// expirations as ObjectRemoved:Delete too). A delete marker's creation, and
// MinIO's DeleteAllVersions and LifecycleDelMarkerExpiration:Delete (the key
// reads as absent before and after), are about the key whatever version they
// name; so are the wildcards, whose meaning a hand-written sender decides.
func versionOnly(kind Kind, name, versionID string) bool {
	if kind != Removed || !realVersion(versionID) {
		return false
	}
	switch strings.TrimPrefix(name, "s3:") {
	case "ObjectRemoved:Delete", "LifecycleExpiration:Delete":
		return true
	}
	return false
}

// realVersion reports a version id that names one version: not empty, and not
// "null" (the version id of objects written while versioning was off, which
// some servers send for every event of an unversioned bucket).
func realVersion(id string) bool { return id != "" && id != "null" }

// kindOf classifies an S3 event name (with or without the "s3:" prefix).
func kindOf(name string) (Kind, error) {
	n := strings.TrimPrefix(name, "s3:")
	if k, ok := kinds[n]; ok {
		return k, nil
	}
	family, _, _ := strings.Cut(n, ":")
	if k, ok := kindFamilies[family]; ok {
		return k, nil
	}
	return "", fmt.Errorf("%w: %q is not an S3 or MinIO event name cairn knows; if your server sends it, report it with the record", ErrUnknownEventType, truncate(name, 80))
}
