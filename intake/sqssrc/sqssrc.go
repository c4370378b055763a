// Package sqssrc is the Amazon SQS source of cairn's intake (aws-sdk-go-v2):
// it long-polls a queue that receives S3 notifications (S3 → SQS directly,
// S3 → SNS → SQS, or S3 → EventBridge → SQS; every body the event package
// parses), records each batch in the ledger, and deletes the messages only
// after the ledger's decision is durable.
//
// While a batch is being recorded, the messages' visibility timeout is
// extended, so SQS does not hand them to another consumer meanwhile. If the
// ledger fails, the messages are left alone and SQS delivers them again after
// their visibility timeout; the ledger drops the duplicates redelivery causes.
// Entries a DeleteMessageBatch reports as failed are retried with backoff for
// as long as their receipt handles can still be valid (the visibility
// timeout); if they still fail, the messages come back and the ledger records
// them as duplicates.
//
// A poison message (one that is not an S3 notification, or whose records all
// break the event package's limits) can never be recorded, so it is never left
// to come back for ever. What happens to it is Options.Poison:
//   - PoisonDLQ: it is left alone, and the queue's redrive policy moves it to
//     the dead-letter queue after maxReceiveCount receives.
//   - PoisonDelete: it is kept in the ledger as a dead letter with its reason
//     (bucket intake.RefusedBucket: listed, and replayable once cairn accepts
//     it), then deleted from the queue.
//   - PoisonAuto (the default): PoisonDLQ when the queue has a redrive policy,
//     PoisonDelete when it has none (read once with GetQueueAttributes). If the
//     attributes cannot be read (no sqs:GetQueueAttributes permission), it is
//     PoisonDLQ with a warning: a poison message then comes back until its
//     retention period ends, which is the lesser evil than deleting a message
//     a dead-letter queue was configured to keep.
//
// Either way the refusal is counted in cairn_intake_rejected_total. A
// message some of whose records are refused has the good ones recorded and
// is kept as a dead letter too.
//
// Linking the package in registers the sqs:// scheme with intake.OpenSource.
package sqssrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/sourcekit"
	"github.com/cairn-s3/cairn/internal/backoff"
)

// Options configure the source.
type Options struct {
	// Region; default: from the queue URL's host, else the AWS config.
	Region string
	// Endpoint overrides the service endpoint (SQS-compatible servers);
	// default: AWS, or the queue URL's scheme and host if that is not AWS.
	Endpoint string
	// Visibility is the visibility timeout asked for on receive and extended
	// while recording. Default 60s.
	Visibility time.Duration
	// Wait is the long-poll wait. Default 20s (the maximum).
	Wait time.Duration
	// Poison says what becomes of a message that can never be recorded.
	// Default PoisonAuto.
	Poison Poison
	// Client overrides the SQS client (tests, custom credentials).
	Client *sqs.Client
	// Logger; default: discarded.
	Logger *slog.Logger
}

// Poison is the policy for messages that can never be recorded.
type Poison string

// The poison policies (see the package doc).
const (
	PoisonAuto   Poison = "auto"
	PoisonDLQ    Poison = "dlq"
	PoisonDelete Poison = "delete"
)

// maxLoggedBody bounds the body of a deleted poison message in its log line.
const maxLoggedBody = 64 << 10

// Source receives from SQS.
type Source struct {
	queueURL string
	o        Options
	c        *sqs.Client
}

// Open returns a source receiving from the queue at queueURL (e.g.
// https://sqs.eu-west-1.amazonaws.com/123456789012/uploads); opts may be nil
// (the defaults). The client is built from the standard AWS configuration
// chain unless Options.Client is set.
func Open(ctx context.Context, queueURL string, opts *Options) (*Source, error) {
	u, err := url.Parse(queueURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("sqssrc: queue URL %q: want https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE", queueURL)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Visibility <= 0 {
		o.Visibility = 60 * time.Second
	}
	if o.Wait <= 0 || o.Wait > 20*time.Second {
		o.Wait = 20 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch o.Poison {
	case "":
		o.Poison = PoisonAuto
	case PoisonAuto, PoisonDLQ, PoisonDelete:
	default:
		return nil, fmt.Errorf("sqssrc: poison policy %q: want auto, dlq or delete", o.Poison)
	}
	aws := strings.HasSuffix(u.Hostname(), ".amazonaws.com")
	if o.Region == "" && aws {
		if parts := strings.Split(u.Hostname(), "."); len(parts) >= 4 && parts[0] == "sqs" {
			o.Region = parts[1]
		}
	}
	if o.Endpoint == "" && !aws {
		o.Endpoint = u.Scheme + "://" + u.Host
	}
	c := o.Client
	if c == nil {
		var lo []func(*config.LoadOptions) error
		if o.Region != "" {
			lo = append(lo, config.WithRegion(o.Region))
		}
		cfg, err := config.LoadDefaultConfig(ctx, lo...)
		if err != nil {
			return nil, fmt.Errorf("sqssrc: AWS configuration: %w", err)
		}
		if cfg.Region == "" {
			cfg.Region = "us-east-1"
		}
		c = sqs.NewFromConfig(cfg, func(so *sqs.Options) {
			if o.Endpoint != "" {
				so.BaseEndpoint = &o.Endpoint
			}
		})
	}
	return &Source{queueURL: queueURL, o: o, c: c}, nil
}

// FromURL parses sqs://HOST/ACCOUNT/QUEUE (the queue URL without https://),
// with optional ?region=R&endpoint=URL&visibility=DUR&poison=auto|dlq|delete.
func FromURL(ctx context.Context, raw string, log *slog.Logger) (*Source, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "sqs" || u.Host == "" {
		return nil, fmt.Errorf("sqssrc: %q: want sqs://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE", raw)
	}
	q := u.Query()
	o := Options{Region: q.Get("region"), Endpoint: q.Get("endpoint"), Logger: log}
	for k := range q {
		switch k {
		case "region", "endpoint":
		case "poison":
			o.Poison = Poison(q.Get(k))
		case "visibility":
			d, err := time.ParseDuration(q.Get(k))
			if err != nil || d < time.Second {
				return nil, fmt.Errorf("sqssrc: %q: visibility must be a duration of at least 1s", raw)
			}
			o.Visibility = d
		default:
			return nil, fmt.Errorf("sqssrc: %q: unknown parameter %q (region, endpoint, visibility, poison)", raw, k)
		}
	}
	u.Scheme, u.RawQuery = "https", ""
	return Open(ctx, u.String(), &o)
}

func init() {
	intake.RegisterSource("sqs", func(ctx context.Context, url string, log *slog.Logger) (intake.Source, error) {
		s, err := FromURL(ctx, url, log)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// Name is "sqs".
func (s *Source) Name() string { return "sqs" }

// Run receives until ctx is done.
func (s *Source) Run(ctx context.Context, sink intake.Sink) error {
	log := s.o.Logger.With("source", "sqs", "queue", s.queueURL)
	poison := s.poisonPolicy(ctx, log)
	vis := int32(s.o.Visibility / time.Second)
	failures := 0 // receive failures in a row
	for ctx.Err() == nil {
		out, err := s.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &s.queueURL, MaxNumberOfMessages: 10,
			WaitTimeSeconds: int32(s.o.Wait / time.Second), VisibilityTimeout: vis,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			wait := receiveRetry.Delay(failures)
			failures++
			log.Warn("receive failed", "err", err, "retry_in", wait)
			_ = backoff.Sleep(ctx, wait)
			continue
		}
		failures = 0
		if len(out.Messages) == 0 {
			continue
		}
		var ok, bad []types.Message
		var evs []event.Event
		for _, m := range out.Messages {
			body := []byte(aws.ToString(m.Body))
			got, rejected, err := event.ParseAll(body)
			if err == nil && len(got) == 0 && len(rejected) > 0 {
				err = rejected[0]
			}
			if err != nil && poison != PoisonDelete {
				// Left for the queue's redrive policy: its dead-letter
				// queue keeps it.
				sink.Refused("sqs", 1)
				s.logPoison(log, poison, m, err)
				bad = append(bad, m)
				continue
			}
			if err != nil {
				s.logPoison(log, poison, m, err) // with its body: the queue's copy is deleted
			}
			if kept, k := intake.RefusedEvent(body, err, rejected); k {
				// Kept in the ledger as a dead letter with its reason
				// (replayable), recorded with the good records, then
				// deleted from the queue like them.
				log.Warn("message refused in whole or part; kept as a dead letter", "message_id", aws.ToString(m.MessageId), "bucket", kept.Bucket, "key", kept.Key, "reason", kept.RequestID)
				got = append(got, kept)
			}
			ok = append(ok, m)
			evs = append(evs, got...)
		}
		if len(bad) > 0 && poison == PoisonDelete {
			s.delete(ctx, bad, log)
		}
		if len(ok) == 0 {
			continue
		}
		_, err = sourcekit.SubmitKeepingAlive(context.WithoutCancel(ctx), sink, "sqs", evs, s.o.Visibility/3, func() {
			s.extend(ctx, ok, vis, log)
		})
		if errors.Is(err, intake.ErrInvalidEvent) {
			// Cannot happen for what ParseAll returned, but a retry could
			// never succeed either: the batch is poison.
			for _, m := range ok {
				s.logPoison(log, poison, m, err)
			}
			if poison == PoisonDelete {
				s.delete(ctx, ok, log)
			}
			continue
		}
		if err != nil {
			log.Warn("recording failed; the messages will be delivered again", "messages", len(ok), "err", err)
			sourcekit.Sleep(ctx, time.Second)
			continue
		}
		s.delete(ctx, ok, log)
	}
	return nil
}

// poisonPolicy resolves PoisonAuto from the queue's redrive policy.
func (s *Source) poisonPolicy(ctx context.Context, log *slog.Logger) Poison {
	if s.o.Poison != PoisonAuto {
		return s.o.Poison
	}
	out, err := s.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &s.queueURL,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
	if err != nil {
		log.Warn("cannot read the queue's redrive policy; messages that are not events are left for it (grant sqs:GetQueueAttributes, or set poison=dlq or poison=delete)", "err", err)
		return PoisonDLQ
	}
	if out.Attributes[string(types.QueueAttributeNameRedrivePolicy)] != "" {
		log.Info("messages that are not events are left for the queue's redrive policy to dead-letter")
		return PoisonDLQ
	}
	log.Info("the queue has no redrive policy: messages that are not events are logged and deleted")
	return PoisonDelete
}

// logPoison logs a message that can never be recorded, with its body when it
// is about to be deleted (the log is then the only copy).
func (s *Source) logPoison(log *slog.Logger, poison Poison, m types.Message, err error) {
	attrs := []any{"message_id", aws.ToString(m.MessageId), "receive_count", m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)], "err", err}
	if poison == PoisonDelete {
		body := aws.ToString(m.Body)
		if len(body) > maxLoggedBody {
			body = strings.ToValidUTF8(body[:maxLoggedBody], "") + "…(truncated)"
		}
		log.Error("message is not an event; deleted (its body is logged here)", append(attrs, "body", body)...)
		return
	}
	log.Error("message is not an event; left for the queue's dead-letter redrive", attrs...)
}

// extend pushes the messages' visibility timeout out while they are recorded.
func (s *Source) extend(ctx context.Context, ms []types.Message, vis int32, log *slog.Logger) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(ms))
	for i, m := range ms {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: vis}
	}
	out, err := s.c.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.queueURL, Entries: entries})
	if err != nil {
		log.Warn("extending visibility failed", "err", err)
		return
	}
	for _, f := range out.Failed {
		log.Warn("extending visibility failed for a message", "id", aws.ToString(f.Id), "code", aws.ToString(f.Code))
	}
}

// delete removes messages, retrying failed entries with backoff while their
// receipt handles can still be valid: for half the visibility timeout (the
// messages were made invisible for a whole one at their last receive or
// extension), and not after ctx ends once one attempt was made. Whatever is
// not deleted comes back and is recorded as a duplicate.
func (s *Source) delete(ctx context.Context, ms []types.Message, log *slog.Logger) {
	deadline := time.Now().Add(s.o.Visibility / 2)
	pending := map[string]types.Message{}
	for i, m := range ms {
		pending[strconv.Itoa(i)] = m
	}
	for attempt := 1; ; attempt++ {
		entries := make([]types.DeleteMessageBatchRequestEntry, 0, len(pending))
		for id, m := range pending {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(id), ReceiptHandle: m.ReceiptHandle})
		}
		out, err := s.c.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: &s.queueURL, Entries: entries})
		if err == nil {
			for _, ok := range out.Successful {
				delete(pending, aws.ToString(ok.Id))
			}
			for _, f := range out.Failed {
				if f.SenderFault { // e.g. ReceiptHandleIsInvalid: retrying cannot help
					log.Warn("delete refused; the message will come back as a duplicate", "id", aws.ToString(f.Id), "code", aws.ToString(f.Code), "message", aws.ToString(f.Message))
					delete(pending, aws.ToString(f.Id))
				}
			}
		}
		if len(pending) == 0 {
			return
		}
		wait := deleteRetry.Delay(attempt - 1)
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			log.Warn("delete failed; the messages will come back as duplicates", "messages", len(pending), "attempts", attempt, "err", err)
			return
		}
		log.Debug("delete failed; retrying", "messages", len(pending), "attempt", attempt, "err", err)
		// Cut short when ctx ends: one last attempt follows at once.
		_ = backoff.Sleep(ctx, wait)
	}
}

// Backoff of the source's retries (full jitter): receiving after a failed
// ReceiveMessage, from 1s up to 30s; deleting entries a DeleteMessageBatch
// failed, from 200ms up to 5s.
var (
	receiveRetry = backoff.Policy{Base: time.Second, Max: 30 * time.Second}
	deleteRetry  = backoff.Policy{Base: 200 * time.Millisecond, Max: 5 * time.Second}
)
