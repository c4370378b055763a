package awslambda

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/cairn-s3/cairn/event"
)

// kind is what an invocation's payload is.
type kind int

const (
	kindDirect kind = iota // S3, MinIO or EventBridge events, or s3:TestEvent, in the payload itself
	kindSQS                // an SQS batch: one message per record, answered with batchItemFailures
	kindSNS                // SNS notifications, one message per record
	kindDrain              // a scheduled invocation: run what is due
	kindJobs               // a scheduled invocation: run the jobs and the purge, then what is due
)

func (k kind) String() string { return [...]string{"direct", "sqs", "sns", "drain", "jobs"}[k] }

// message is one delivery the invocation answers for: the whole payload of a
// direct invocation, one SQS or SNS record of a batch.
type message struct {
	id    string // SQS messageId: what batchItemFailures names
	group string // SQS FIFO MessageGroupId; "" on a standard queue
	body  []byte
	evs   []event.Event       // the events that parsed
	rej   []*event.ParseError // records refused, when others parsed
	err   error               // the message as a whole is no event
}

// invocation is a classified payload.
type invocation struct {
	kind kind
	msgs []*message
	fifo bool
}

// probe holds the top-level fields that tell the payloads apart.
type probe struct {
	Records    []json.RawMessage `json:"Records"`
	Source     string            `json:"source"`
	DetailType string            `json:"detail-type"`
	Cairn      string            `json:"cairn"`
}

// recordSource is the field that names a Records entry's origin ("aws:sqs",
// and "aws:sns" as SNS spells it).
type recordSource struct {
	EventSource  string `json:"eventSource"`
	EventSource2 string `json:"EventSource"`
}

// errNotInvocation: the payload is not JSON an invocation carries.
var errNotInvocation = errors.New("not a JSON object")

// DrainPayload is the payload of an invocation that drains: it runs what is
// due (retries whose backoff ended, work whose key was busy, claims whose
// holder was killed), as an EventBridge "Scheduled Event" does. Schedule it
// every minute (an EventBridge rule's constant input).
const DrainPayload = `{"cairn":"drain"}`

// JobsPayload is the payload of an invocation that runs Options.Jobs (the
// audit) and the purge of Options.Retention, then drains. Schedule it less
// often (hourly, say) with a rule of its own.
const JobsPayload = `{"cairn":"jobs"}`

// classify tells what payload is and parses its messages. It fails only for
// a payload that is not a JSON object at all; anything else that is no event
// becomes a message with err set (refused, kept as a dead letter).
func classify(payload []byte) (*invocation, error) {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errNotInvocation
	}
	var pr probe
	if err := json.Unmarshal(trimmed, &pr); err != nil {
		// Not even the probe's shape (Records not an array, say): one
		// message the event parser names the fault of.
		return direct(trimmed), nil
	}
	var first recordSource
	if len(pr.Records) > 0 {
		_ = json.Unmarshal(pr.Records[0], &first) // a record that is no object has no source
	}
	switch {
	case pr.Cairn == "drain", pr.Source == "aws.events" && pr.DetailType == "Scheduled Event":
		return &invocation{kind: kindDrain}, nil
	case pr.Cairn == "jobs":
		return &invocation{kind: kindJobs}, nil
	case first.EventSource == "aws:sqs":
		inv := &invocation{kind: kindSQS}
		for i, raw := range pr.Records {
			m := sqsMessage(raw, i)
			if m.group != "" {
				inv.fifo = true
			}
			inv.msgs = append(inv.msgs, m)
		}
		return inv, nil
	case first.EventSource2 == "aws:sns":
		var b events.SNSEvent
		if err := json.Unmarshal(trimmed, &b); err != nil {
			return direct(trimmed), nil
		}
		inv := &invocation{kind: kindSNS}
		for _, r := range b.Records {
			m := &message{id: r.SNS.MessageID, body: []byte(r.SNS.Message)}
			parse(m)
			inv.msgs = append(inv.msgs, m)
		}
		return inv, nil
	}
	return direct(trimmed), nil
}

// sqsMessage reads record i of an SQS batch leniently, one record at a
// time: a record whose fields have the wrong types keeps whatever names it
// (its messageId), and is refused alone, never taking its batch with it.
func sqsMessage(raw json.RawMessage, i int) *message {
	var r struct {
		MessageID   string                     `json:"messageId"`
		Body        string                     `json:"body"`
		EventSource string                     `json:"eventSource"`
		Attributes  map[string]json.RawMessage `json:"attributes"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		var loose map[string]json.RawMessage
		_ = json.Unmarshal(raw, &loose)
		_ = json.Unmarshal(loose["messageId"], &r.MessageID)
		return &message{id: r.MessageID, body: raw, err: fmt.Errorf("%w: SQS batch record %d: %v", event.ErrMalformed, i, err)}
	}
	m := &message{id: r.MessageID, body: []byte(r.Body)}
	_ = json.Unmarshal(r.Attributes["MessageGroupId"], &m.group)
	if r.EventSource != "aws:sqs" || r.MessageID == "" {
		m.body = raw
		m.err = fmt.Errorf("%w: SQS batch record %d has no messageId or comes from %q", event.ErrMalformed, i, r.EventSource)
		return m
	}
	parse(m)
	return m
}

// direct is a payload that is itself one message (S3 or MinIO Records, an
// EventBridge event, s3:TestEvent, or something that is none of them).
func direct(payload []byte) *invocation {
	m := &message{body: payload}
	parse(m)
	return &invocation{kind: kindDirect, msgs: []*message{m}}
}

// parse fills m's events from its body.
func parse(m *message) {
	evs, rej, err := event.ParseAll(m.body)
	switch {
	case err != nil:
		m.err = err
	case len(evs) == 0 && len(rej) > 0:
		m.err = rej[0]
		m.rej = rej
	default:
		m.evs, m.rej = evs, rej
	}
}
