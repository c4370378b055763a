// Package natssrc is the NATS JetStream source of cairn's intake: it pulls
// object-change notifications (as MinIO's NATS target publishes them with
// jetstream=on, or any body the event package parses) from a durable pull
// consumer and acknowledges each message only after the ledger's decision on
// its events is durable.
//
// While a batch is being recorded, its messages are kept in progress (the
// server's redelivery timer is reset). If the ledger fails, the messages are
// negatively acknowledged with a delay, so JetStream redelivers them; the
// ledger drops the duplicates that redelivery can cause. A message that does
// not parse (or has records that do not) is kept in the ledger as a refused
// message (intake.RefusedEvent: a dead letter with its reason, replayable),
// logged with its stream sequence, and acknowledged once recorded:
// redelivering it cannot help.
//
// Linking the package in registers the nats:// scheme with intake.OpenSource.
package natssrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/sourcekit"
)

// Options configure the source.
type Options struct {
	// Subject filters the consumer (and is the new stream's subject). Required
	// if the stream must be created.
	Subject string
	// Durable names the pull consumer, so a restarted cairn resumes where it
	// stopped. Default "cairn".
	Durable string
	// Batch is the most messages fetched and recorded at once. Default 256.
	Batch int
	// AckWait is the consumer's redelivery timer. Default 30s.
	AckWait time.Duration
	// Logger; default: discarded.
	Logger *slog.Logger
}

// Source pulls from JetStream.
type Source struct {
	servers, stream string
	o               Options
}

// Open returns a source pulling from stream on the NATS servers (nats://host:port;
// several comma-separated). The stream is created (file storage, capturing
// Options.Subject) if it does not exist; an existing stream is never changed.
// opts may be nil (the defaults). Nothing connects until Run (ctx is for
// the sources' common signature).
func Open(ctx context.Context, servers, stream string, opts *Options) (*Source, error) {
	if servers == "" || stream == "" {
		return nil, errors.New("natssrc: a server URL and a stream are required")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Durable == "" {
		o.Durable = "cairn"
	}
	if o.Batch <= 0 {
		o.Batch = 256
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Source{servers: servers, stream: stream, o: o}, nil
}

// FromURL parses nats://HOST:PORT?stream=S&subject=X&durable=D&batch=N
// (user:password@ in the URL authenticates).
func FromURL(ctx context.Context, raw string, log *slog.Logger) (*Source, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "nats" || u.Host == "" {
		return nil, fmt.Errorf("natssrc: %q: want nats://HOST:PORT?stream=S&subject=X&durable=D", raw)
	}
	q := u.Query()
	stream := q.Get("stream")
	o := Options{Subject: q.Get("subject"), Durable: q.Get("durable"), Logger: log}
	for k := range q {
		switch k {
		case "stream", "subject", "durable":
		case "batch":
			n, err := strconv.Atoi(q.Get(k))
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("natssrc: %q: batch must be a positive integer", raw)
			}
			o.Batch = n
		default:
			return nil, fmt.Errorf("natssrc: %q: unknown parameter %q (stream, subject, durable, batch)", raw, k)
		}
	}
	if stream == "" {
		return nil, fmt.Errorf("natssrc: %q: stream= is required", raw)
	}
	u.RawQuery = ""
	return Open(ctx, u.String(), stream, &o)
}

func init() {
	intake.RegisterSource("nats", func(ctx context.Context, url string, log *slog.Logger) (intake.Source, error) {
		s, err := FromURL(ctx, url, log)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// Name is "nats".
func (s *Source) Name() string { return "nats" }

// Run consumes until ctx is done.
func (s *Source) Run(ctx context.Context, sink intake.Sink) error {
	nc, err := nats.Connect(s.servers, nats.Name("cairn"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("natssrc: connecting to %s: %w", s.servers, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := js.Stream(ctx, s.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if s.o.Subject == "" {
			return fmt.Errorf("natssrc: stream %s does not exist; give subject= to have it created", s.stream)
		}
		stream, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: s.stream, Subjects: []string{s.o.Subject}, Storage: jetstream.FileStorage})
	}
	if err != nil {
		return fmt.Errorf("natssrc: stream %s: %w", s.stream, err)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: s.o.Durable, AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: s.o.Subject, AckWait: s.o.AckWait, MaxAckPending: 4 * s.o.Batch})
	if err != nil {
		return fmt.Errorf("natssrc: consumer %s: %w", s.o.Durable, err)
	}
	log := s.o.Logger.With("source", "nats", "stream", s.stream)
	for ctx.Err() == nil {
		batch, err := cons.Fetch(s.o.Batch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			log.Warn("fetch failed", "err", err)
			sourcekit.Sleep(ctx, time.Second)
			continue
		}
		var msgs []jetstream.Msg
		var evs []event.Event
		for m := range batch.Messages() {
			got, rejected, err := event.ParseAll(m.Data())
			if kept, ok := intake.RefusedEvent(m.Data(), err, rejected); ok {
				// Kept as a dead letter with its reason (replayable) and
				// acknowledged once recorded, with the good records.
				seq := uint64(0)
				if md, merr := m.Metadata(); merr == nil {
					seq = md.Sequence.Stream
				}
				log.Warn("message refused in whole or part; kept as a dead letter", "stream_seq", seq, "bucket", kept.Bucket, "key", kept.Key, "reason", kept.RequestID)
				got = append(got, kept)
			}
			msgs = append(msgs, m)
			evs = append(evs, got...)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			log.Warn("fetch ended with an error", "err", err)
		}
		if len(msgs) == 0 {
			continue
		}
		// Record while the messages are kept in progress; ack only after.
		_, err = sourcekit.SubmitKeepingAlive(context.WithoutCancel(ctx), sink, "nats", evs, s.o.AckWait/3, func() {
			for _, m := range msgs {
				_ = m.InProgress()
			}
		})
		invalid := errors.Is(err, intake.ErrInvalidEvent) // a retry cannot succeed
		for _, m := range msgs {
			if invalid {
				_ = m.TermWithReason("cairn: " + err.Error())
			} else if err != nil {
				_ = m.NakWithDelay(time.Second)
			} else if aerr := m.Ack(); aerr != nil {
				// Redelivered later; the ledger will call it a duplicate.
				log.Warn("ack failed", "err", aerr)
			}
		}
		if err != nil {
			log.Warn("recording failed; messages will be redelivered", "messages", len(msgs), "err", err)
			sourcekit.Sleep(ctx, time.Second)
		}
	}
	return nil
}
