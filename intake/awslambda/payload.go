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
	Records []struct {
		EventSource  string `json:"eventSource"`
		EventSource2 string `json:"EventSource"` // SNS spells it so
	} `json:"Records"`
	Source     string `json:"source"`
	DetailType string `json:"detail-type"`
	Cairn      string `json:"cairn"`
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
	switch {
	case pr.Cairn == "drain", pr.Source == "aws.events" && pr.DetailType == "Scheduled Event":
		return &invocation{kind: kindDrain}, nil
	case pr.Cairn == "jobs":
		return &invocation{kind: kindJobs}, nil
	case len(pr.Records) > 0 && pr.Records[0].EventSource == "aws:sqs":
		var b events.SQSEvent
		if err := json.Unmarshal(trimmed, &b); err != nil {
			return direct(trimmed), nil
		}
		inv := &invocation{kind: kindSQS}
		for _, r := range b.Records {
			m := &message{id: r.MessageId, group: r.Attributes["MessageGroupId"], body: []byte(r.Body)}
			if r.EventSource != "aws:sqs" || r.MessageId == "" {
				m.err = fmt.Errorf("%w: an SQS batch record without its messageId or from %q", event.ErrMalformed, r.EventSource)
			} else {
				parse(m)
			}
			if m.group != "" {
				inv.fifo = true
			}
			inv.msgs = append(inv.msgs, m)
		}
		return inv, nil
	case len(pr.Records) > 0 && pr.Records[0].EventSource2 == "aws:sns":
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
