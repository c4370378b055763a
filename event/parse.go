package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// maxDepth bounds nested envelopes (SQS → SNS → S3 is 3).
const maxDepth = 4

// Parse decodes one message into its events. It fails if any record fails
// (ParseAll keeps the good records of a message with bad ones).
func Parse(data []byte) ([]Event, error) {
	evs, rejected, err := ParseAll(data)
	if err == nil && len(rejected) > 0 {
		err = rejected[0]
	}
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// ParseAll decodes one message into its events, keeping the good records of
// a message that also has bad ones: evs are the records that parsed and
// validated, rejected names each one that did not (its Field is the record's
// path, e.g. "Records[2].s3.object.key"). err is for the message as a whole
// (not JSON, no shape fits, no records at all), and then evs and rejected
// are empty. A message whose records are all bad has no evs and no err.
func ParseAll(data []byte) (evs []Event, rejected []*ParseError, err error) {
	if evs, ok := parseFast(data); ok {
		return evs, nil, nil
	}
	p := &parser{}
	evs, err = p.parse(data, "", 0)
	if err != nil {
		return nil, nil, err
	}
	return evs, p.rejected, nil
}

// parser collects the records it rejects while it keeps going.
type parser struct {
	rejected []*ParseError
}

// reject records a bad record; err is a *ParseError from the record's parse.
func (p *parser) reject(path string, err error) {
	var pe *ParseError
	if !errors.As(err, &pe) {
		pe = &ParseError{Field: path, Err: fmt.Errorf("%w: %v", ErrMalformed, err)}
	}
	p.rejected = append(p.rejected, pe)
}

// fastBody is the common case — S3 or MinIO Records, no envelope — decoded
// in one pass. Anything else, and every error, goes the careful way (parse),
// which names the offending field.
type fastBody struct {
	Records    []s3Record `json:"Records"`
	EventName  *string    `json:"EventName"`
	Type       string     `json:"Type"`
	DetailType string     `json:"detail-type"`
	Event      string     `json:"Event"`
}

func parseFast(data []byte) ([]Event, bool) {
	var b fastBody
	if err := json.Unmarshal(data, &b); err != nil || len(b.Records) == 0 || b.Type != "" || b.DetailType != "" || b.Event != "" {
		return nil, false
	}
	out := make([]Event, 0, len(b.Records))
	for i := range b.Records {
		r := &b.Records[i]
		if r.EventSource == "aws:sqs" || r.EventSource == "aws:sns" || r.EventSource == "" && r.EventName == "" {
			return nil, false // an envelope (Lambda's SQS or SNS batch): the careful way
		}
		ev, err := buildRecord(r, "", b.EventName != nil)
		if err != nil {
			return nil, false
		}
		out = append(out, ev)
	}
	return out, true
}

// probe holds the top-level fields that tell the shapes apart.
type probe struct {
	Records    json.RawMessage `json:"Records"`
	EventName  *string         `json:"EventName"` // MinIO
	Type       string          `json:"Type"`      // SNS
	Message    *string         `json:"Message"`   // SNS
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Detail     json.RawMessage `json:"detail"`
	Event      string          `json:"Event"` // s3:TestEvent
	Bucket     string          `json:"Bucket"`
	RequestID  string          `json:"RequestId"`
	HostID     string          `json:"HostId"`
	Time       string          `json:"Time"`
}

func jsonErr(path string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if path != "" && field != "" {
			field = path + "." + field
		} else if path != "" {
			field = path
		}
		return malformed(field, "%s is not a JSON %s", te.Value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return malformed(path, "invalid JSON at byte %d: %v", se.Offset, err)
	}
	return malformed(path, "%v", err)
}

func (p *parser) parse(data []byte, path string, depth int) ([]Event, error) {
	if depth > maxDepth {
		return nil, malformed(path, "envelopes nested more than %d deep", maxDepth)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &ParseError{Field: path, Err: fmt.Errorf("%w: not a JSON object", ErrUnknownFormat)}
	}
	var pr probe
	if err := json.Unmarshal(trimmed, &pr); err != nil {
		return nil, jsonErr(path, err)
	}
	switch {
	case pr.Event == "s3:TestEvent":
		ev := Event{Bucket: pr.Bucket, Kind: Test, Name: "TestEvent", RequestID: pr.RequestID, HostID: pr.HostID, Format: FormatS3}
		ev.Time, _ = time.Parse(time.RFC3339Nano, pr.Time)
		return []Event{ev}, nil
	case pr.Type == "Notification" && pr.Message != nil:
		evs, err := p.parse([]byte(*pr.Message), join(path, "Message"), depth+1)
		return retag(evs, FormatSNS), err
	case pr.Type == "SubscriptionConfirmation" || pr.Type == "UnsubscribeConfirmation":
		return nil, &ParseError{Field: join(path, "Type"), Err: fmt.Errorf("%w: SNS %s messages carry no object event; confirm the subscription via its SubscribeURL", ErrUnknownFormat, pr.Type)}
	case pr.Source == "aws.s3" && pr.DetailType != "":
		return parseEventBridge(trimmed, path)
	case pr.Records != nil:
		return p.parseRecords(pr.Records, join(path, "Records"), pr.EventName != nil, depth)
	}
	return nil, &ParseError{Field: path, Err: fmt.Errorf("%w: expected S3 Records, an SNS notification, an EventBridge event or a MinIO webhook body", ErrUnknownFormat)}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func retag(evs []Event, f Format) []Event {
	for i := range evs {
		if evs[i].Format == FormatS3 {
			evs[i].Format = f
		}
	}
	return evs
}

// wrapper fields of a record that is itself an envelope (Lambda's SQS and SNS
// batches).
type envelopeRecord struct {
	Body        *string `json:"body"`
	EventSource string  `json:"eventSource"`
	Sns         *struct {
		Message string `json:"Message"`
	} `json:"Sns"`
}

// parseRecords parses each record on its own: a bad one is rejected (see
// parser.reject) and the others are kept. Only a Records value that is not a
// list, or an empty list, fails the message.
func (p *parser) parseRecords(raw json.RawMessage, path string, minio bool, depth int) ([]Event, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, jsonErr(path, err)
	}
	if len(items) == 0 {
		return nil, malformed(path, "no records")
	}
	var out []Event
	for i, item := range items {
		rp := fmt.Sprintf("%s[%d]", path, i)
		var env envelopeRecord
		if err := json.Unmarshal(item, &env); err != nil {
			p.reject(rp, jsonErr(rp, err))
			continue
		}
		switch {
		case env.Body != nil && env.EventSource == "aws:sqs":
			evs, err := p.parse([]byte(*env.Body), join(rp, "body"), depth+1)
			if err != nil {
				p.reject(rp, err)
			}
			out = append(out, retag(evs, FormatSQS)...)
			continue
		case env.Sns != nil:
			evs, err := p.parse([]byte(env.Sns.Message), join(rp, "Sns.Message"), depth+1)
			if err != nil {
				p.reject(rp, err)
			}
			out = append(out, retag(evs, FormatSNS)...)
			continue
		}
		ev, err := parseRecord(item, rp, minio)
		if err != nil {
			p.reject(rp, err)
			continue
		}
		out = append(out, ev)
	}
	return out, nil
}

// s3Record is aws-lambda-go's record, with the object decoded by hand: its own
// decoder fails the whole record without naming the field on a bad key.
type s3Record struct {
	events.S3EventRecord
	S3 struct {
		Bucket events.S3Bucket `json:"bucket"`
		Object struct {
			Key       *string `json:"key"`
			Size      int64   `json:"size"`
			VersionID string  `json:"versionId"`
			ETag      string  `json:"eTag"`
			Sequencer string  `json:"sequencer"`
		} `json:"object"`
	} `json:"s3"`
}

func parseRecord(item json.RawMessage, path string, minio bool) (Event, error) {
	var r s3Record
	if err := json.Unmarshal(item, &r); err != nil {
		return Event{}, jsonErr(path, err)
	}
	return buildRecord(&r, path, minio)
}

// buildRecord validates a decoded record and normalises it.
func buildRecord(r *s3Record, path string, minio bool) (Event, error) {
	if r.EventName == "" {
		return Event{}, malformed(join(path, "eventName"), "missing")
	}
	kind, err := kindOf(r.EventName)
	if err != nil {
		return Event{}, &ParseError{Field: join(path, "eventName"), Err: err}
	}
	ev := Event{Name: strings.TrimPrefix(r.EventName, "s3:"), Kind: kind, Time: r.EventTime, Region: r.AWSRegion, Format: FormatS3,
		Bucket: r.S3.Bucket.Name, VersionID: r.S3.Object.VersionID, ETag: strings.Trim(r.S3.Object.ETag, `"`),
		Size: r.S3.Object.Size, Sequencer: strings.ToUpper(r.S3.Object.Sequencer)}
	ev.VersionOnly = versionOnly(kind, ev.Name, ev.VersionID)
	if minio || r.EventSource == "minio:s3" {
		ev.Format = FormatMinIO
	}
	ev.RequestID = r.ResponseElements["x-amz-request-id"]
	ev.HostID = r.ResponseElements["x-amz-id-2"]
	if ev.Bucket == "" && !ev.Ignorable() {
		return Event{}, malformed(join(path, "s3.bucket.name"), "missing")
	}
	if (r.S3.Object.Key == nil || *r.S3.Object.Key == "") && !ev.Ignorable() {
		return Event{}, malformed(join(path, "s3.object.key"), "missing")
	}
	if r.S3.Object.Key != nil {
		ev.Key, err = url.QueryUnescape(*r.S3.Object.Key)
		if err != nil {
			return Event{}, malformed(join(path, "s3.object.key"), "invalid URL encoding: %v", err)
		}
	}
	if ev.Size < 0 {
		return Event{}, malformed(join(path, "s3.object.size"), "negative")
	}
	if err := ev.validate(path, "s3.bucket.name", "s3.object.key", "s3.object.sequencer"); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// eventBridgeKinds classifies every detail-type S3 sends to EventBridge.
// "Object Deleted" is a removal whatever its reason ("DeleteObject" or
// "Lifecycle Expiration") and deletion-type ("Permanently Deleted" or "Delete
// Marker Created"), of one version only (VersionOnly) when it was permanently
// deleted and names a version; "Object Created" a creation whatever its reason
// (PutObject, POST Object, CopyObject, CompleteMultipartUpload). The others
// leave the content as it was: restores of archived objects, tags, ACLs,
// storage class and access tier changes, and the end of an asynchronous copy
// job (the object it writes is announced by its own "Object Created").
var eventBridgeKinds = map[string]Kind{
	"Object Created":           Created,
	"Object Deleted":           Removed,
	"Object Restore Initiated": Other, "Object Restore Completed": Other, "Object Restore Expired": Other,
	"Object Tags Added": Other, "Object Tags Deleted": Other, "Object ACL Updated": Other,
	"Object Storage Class Changed": Other, "Object Access Tier Changed": Other, "Async Copy Completion": Other,
}

type eventBridge struct {
	DetailType string    `json:"detail-type"`
	Time       time.Time `json:"time"`
	Region     string    `json:"region"`
	Detail     struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key       *string `json:"key"`
			Size      int64   `json:"size"`
			ETag      string  `json:"etag"`
			VersionID string  `json:"version-id"`
			Sequencer string  `json:"sequencer"`
		} `json:"object"`
		RequestID    string `json:"request-id"`
		Reason       string `json:"reason"`
		DeletionType string `json:"deletion-type"`
	} `json:"detail"`
}

func parseEventBridge(data []byte, path string) ([]Event, error) {
	var e eventBridge
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, jsonErr(path, err)
	}
	kind, ok := eventBridgeKinds[e.DetailType]
	if !ok {
		return nil, &ParseError{Field: join(path, "detail-type"), Err: fmt.Errorf("%w: %q is not an S3 EventBridge detail-type cairn knows; if S3 sends it, report it with the event", ErrUnknownEventType, truncate(e.DetailType, 80))}
	}
	o := e.Detail.Object
	ev := Event{Bucket: e.Detail.Bucket.Name, VersionID: o.VersionID, ETag: strings.Trim(o.ETag, `"`), Size: o.Size,
		Sequencer: strings.ToUpper(o.Sequencer), Kind: kind, Name: e.DetailType, Time: e.Time, Region: e.Region,
		RequestID: e.Detail.RequestID, Format: FormatEventBridge}
	if e.Detail.Reason != "" {
		ev.Name += ":" + e.Detail.Reason
	}
	// "Permanently Deleted" with a version-id deleted that version only (see
	// Versions in the package doc); without one, or "Delete Marker Created",
	// the key reads as absent.
	ev.VersionOnly = kind == Removed && e.Detail.DeletionType == "Permanently Deleted" && realVersion(o.VersionID)
	switch {
	case ev.Bucket == "" && !ev.Ignorable():
		return nil, malformed(join(path, "detail.bucket.name"), "missing")
	case (o.Key == nil || *o.Key == "") && !ev.Ignorable():
		return nil, malformed(join(path, "detail.object.key"), "missing")
	case ev.Size < 0:
		return nil, malformed(join(path, "detail.object.size"), "negative")
	}
	if o.Key != nil {
		ev.Key = *o.Key // EventBridge keys are not URL-encoded
	}
	if err := ev.validate(path, "detail.bucket.name", "detail.object.key", "detail.object.sequencer"); err != nil {
		return nil, err
	}
	return []Event{ev}, nil
}
