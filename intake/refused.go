package intake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// Refused messages: see "Refused messages" in the package doc.
const (
	// RefusedBucket is the bucket name refused messages are kept under.
	RefusedBucket = "cairn:refused"
	// RefusedPrefix begins the event name of a refused message's record.
	RefusedPrefix = "cairn:Refused:"
	// MaxKeptMessage is the largest message kept whole with its record (so
	// that a replay can parse it again); MinIO's and S3's messages are a few
	// KiB. A larger one keeps its first bytes in the reason only.
	MaxKeptMessage = 16 << 10
	// refusedSeq is every refused message's sequencer: one message, one
	// state.
	refusedSeq = "1"
	// maxReason bounds the kept reason; excerpt the message's first bytes
	// shown in it.
	maxReason = 2048
	// maxListedRejections bounds the refused records a reason and a webhook
	// answer name one by one (the count says how many there were).
	maxListedRejections = 100
	excerpt             = 512
)

// FormatRefused is the format of a refused message's record.
const FormatRefused event.Format = "refused"

// The classes of refused messages (RefusedPrefix + class is the record's
// event name).
const (
	RefusedMalformed        = "Malformed"
	RefusedUnknownFormat    = "UnknownFormat"
	RefusedUnknownEventType = "UnknownEventType"
	RefusedTooLarge         = "TooLarge"
)

// RefusedEvent returns the event that keeps a message cairn could not accept
// in full as a visible, replayable record (see RefusedBucket): err is the
// message's error from event.ParseAll, or rejected its refused records. ok is
// false when there is nothing refused. A source submits it with the
// message's good events (if any) and acknowledges the message once Submit
// returned, as for any other: the refusal is then durable and visible, and
// the sender never delivers the message again.
func RefusedEvent(body []byte, err error, rejected []*event.ParseError) (ev event.Event, ok bool) {
	if err == nil && len(rejected) == 0 {
		return event.Event{}, false
	}
	var reasons []string
	for _, pe := range rejected {
		if len(reasons) == maxListedRejections {
			break // the reason is clipped to maxReason anyway: a body of a million empty records must not build a million strings
		}
		reasons = append(reasons, pe.Error())
	}
	if len(rejected) > 0 {
		err = rejected[0] // ParseAll's err is for the message as a whole, then nothing is rejected
	} else {
		reasons = append(reasons, err.Error())
	}
	reason := strings.Join(reasons, "; ")
	if len(rejected) > 1 {
		reason = strconv.Itoa(len(rejected)) + " records refused: " + reason
	}
	return refusedEvent(classOf(err), reason, body, true), true
}

// refusedEvent builds a refused message's record; complete says body is the
// whole message (false: its first bytes, the rest was not read).
func refusedEvent(class, reason string, body []byte, complete bool) event.Event {
	sum := sha256.Sum256(body)
	ev := event.Event{Bucket: RefusedBucket, Key: hex.EncodeToString(sum[:]), Sequencer: refusedSeq, Kind: event.Created,
		Name: RefusedPrefix + class, Size: int64(len(body)), Time: time.Now().UTC(), Format: FormatRefused,
		RequestID: clipText(reason, maxReason)}
	if complete && len(body) <= MaxKeptMessage && utf8.Valid(body) && !bytes.ContainsRune(body, 0) {
		ev.HostID = string(body) // no NUL: PostgreSQL's text cannot hold it
	}
	return ev
}

// classOf names the class of a parse error.
func classOf(err error) string {
	switch {
	case errors.Is(err, event.ErrUnknownEventType):
		return RefusedUnknownEventType
	case errors.Is(err, event.ErrUnknownFormat):
		return RefusedUnknownFormat
	}
	return RefusedMalformed
}

// metricReason is cairn_intake_rejected_total's reason for a class.
func metricReason(class string) string {
	switch class {
	case RefusedUnknownEventType, RefusedUnknownFormat:
		return "unknown"
	case RefusedTooLarge:
		return "too_large"
	}
	return "malformed"
}

// clipText cuts s to at most n bytes at a character boundary, as valid UTF-8
// without NUL (which PostgreSQL's text cannot hold).
func clipText(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// refusedCause is the last error a refused message's record is failed with.
// lead says when ("refused at intake", "replayed, still refused"); reason is
// why.
func refusedCause(ev event.Event, lead, reason string) string {
	class := strings.TrimPrefix(ev.Name, RefusedPrefix)
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s", lead, class, reason)
	if ev.HostID != "" {
		fmt.Fprintf(&b, "; message (%d bytes): %s", ev.Size, clipText(ev.HostID, excerpt))
	} else {
		fmt.Fprintf(&b, "; the message (%d bytes) was not kept (larger than %d bytes, or not UTF-8)", ev.Size, MaxKeptMessage)
	}
	b.WriteString("; once cairn accepts it, replay it (cairn replay --bucket " + RefusedBucket + " --key " + ev.Key + ")")
	return clipText(b.String(), ledger.MaxText)
}

// refusalGuard keeps refused messages' records from the user's handler: the
// first claim fails the record as permanent (dead) with its reason; a claim
// after a replay parses the kept message again (Pipeline.replayRefused).
type refusalGuard struct {
	p    *Pipeline
	next Handler
}

func (g refusalGuard) Handle(ctx context.Context, w Work) (string, error) {
	if w.Event.Bucket != RefusedBucket {
		return g.next.Handle(ctx, w)
	}
	if w.replays == 0 {
		return "", Permanent(errors.New(refusedCause(w.Event, "refused at intake", w.Event.RequestID)))
	}
	return g.p.replayRefused(ctx, w)
}

// replayRefused records the events a replayed refused message yields now.
func (p *Pipeline) replayRefused(ctx context.Context, w Work) (string, error) {
	if w.Event.HostID == "" {
		return "", Permanent(fmt.Errorf("replayed, but the message was not kept (%d bytes; cairn keeps up to %d bytes of UTF-8): it cannot be parsed again; run an audit (cairn audit) to find the changes it announced, then purge this record (%s)",
			w.Event.Size, MaxKeptMessage, strings.TrimPrefix(w.Event.Name, RefusedPrefix)))
	}
	evs, rejected, err := event.ParseAll([]byte(w.Event.HostID))
	if err != nil {
		return "", Permanent(errors.New(refusedCause(w.Event, "replayed, still refused", err.Error())))
	}
	var ds []ledger.Decision
	if len(evs) > 0 {
		if ds, err = p.Submit(ctx, w.Source, evs); err != nil {
			if errors.Is(err, ErrInvalidEvent) {
				return "", Permanent(errors.New(refusedCause(w.Event, "replayed, still refused", err.Error())))
			}
			return "", err // the ledger did not record: retried
		}
	}
	counts := map[ledger.Outcome]int{}
	for _, d := range ds {
		counts[d.Outcome]++
	}
	var parts []string
	for _, o := range []ledger.Outcome{ledger.Accepted, ledger.Coalesced, ledger.Duplicate, ledger.Stale, ledger.Ignored} {
		if counts[o] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, counts[o]))
		}
	}
	summary := fmt.Sprintf("replayed: %d events recorded (%s)", len(ds), strings.Join(parts, ", "))
	if len(rejected) > 0 {
		reasons := make([]string, len(rejected))
		for i, pe := range rejected {
			reasons[i] = pe.Error()
		}
		lead := "replayed, still refused"
		if len(ds) > 0 {
			lead = summary + "; still refused"
		}
		return "", Permanent(errors.New(refusedCause(w.Event, lead, strings.Join(reasons, "; "))))
	}
	return summary, nil
}

// Refused counts n messages source refused without submitting them, in
// cairn_intake_rejected_total (reason invalid_record), and shows them on the
// status page (Refusals, RecentRefusals); see Sink.
func (p *Pipeline) Refused(source string, n int) {
	if n > 0 {
		p.reject(source, "invalid_record", n, refusalNote{answer: "refused by the source (left to the queue's redrive policy; its log says why)"})
	}
}

// refusalNote is what the page shows of one refused message besides its source
// and reason.
type refusalNote struct {
	// metric is cairn_intake_rejected_total's reason when it differs from
	// the page's (a content class: the metric's is coarser).
	metric              string
	answer, key, detail string
}

// reject counts n refusals by source for reason in
// cairn_intake_rejected_total and keeps them for the status page and its
// API: the one place that does both (the webhook's refusals, Submit's, and
// a source's through Refused), so that every refusal the metric counts is
// also on the page.
func (p *Pipeline) reject(source, reason string, n int, r refusalNote) {
	metric := reason
	if r.metric != "" {
		metric = r.metric
	}
	p.m.rejected.WithLabelValues(source, metric).Add(float64(n))
	p.refusals.note(source, reason, r.answer, r.key, r.detail, n)
}

// noteRefused counts and logs a refused message Submit records.
func (p *Pipeline) noteRefused(source string, ev event.Event) {
	class := strings.TrimPrefix(ev.Name, RefusedPrefix)
	p.reject(source, class, 1, refusalNote{metric: metricReason(class), answer: "kept as a dead letter: " + RefusedBucket + "/" + ev.Key,
		key: RefusedBucket + "/" + ev.Key, detail: ev.RequestID})
}

// refusalEvery is how often the log repeats a refusal it has already
// reported (with how many followed).
const refusalEvery = time.Minute

// Refusal summarises the messages of one source refused for one reason, for
// the status page and its API (Pipeline.Refusals).
type Refusal struct {
	Source string `json:"source"`
	// Reason: a content class (Malformed, UnknownFormat, UnknownEventType,
	// TooLarge: kept as dead letters), a wiring refusal of the webhook
	// (unauthorized, origin, host, content_type, method: answered 4xx, fixed
	// by configuration, after which the sender's retries deliver),
	// unavailable (the ledger did not record: answered 503, retried by the
	// sender) or invalid_record (an event Submit refused, or a message a
	// source refused itself: Sink.Refused).
	Reason string    `json:"reason"`
	Count  int64     `json:"count"`
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	// Answer is what was done with the last one ("kept as a dead letter:
	// cairn:refused/KEY", "answered 401").
	Answer string `json:"answer"`
	// Detail is the last one's error.
	Detail string `json:"detail"`

	logged     time.Time // when the log last said so
	suppressed int64     // refusals since then the log did not show
}

// RecentRefusal is one refused message (or n of one source and reason at
// once), for the status page's list of the latest (Pipeline.RecentRefusals).
type RecentRefusal struct {
	Time   time.Time `json:"time"`
	Source string    `json:"source"`
	Reason string    `json:"reason"`
	// Count is how many messages this entry stands for (a source may
	// report several at once); usually 1.
	Count int `json:"count"`
	// Key names what was kept or refused, if anything: the dead letter
	// (cairn:refused/HASH) a content refusal was kept as, or the bucket/key
	// of an event the intake refused. Exact bytes: the page shows it
	// escaped.
	Key    string `json:"key,omitempty"`
	Answer string `json:"answer"`
	Detail string `json:"detail,omitempty"`
}

// recentRefusals is how many refusals RecentRefusals keeps.
const recentRefusals = 20

// refusalLog logs refusals at warn, rate-limited (the first of each source
// and reason at once, then at most one line per refusalEvery saying how many
// followed), and keeps them for Pipeline.Refusals, RecentRefusals and
// RefusedTotal.
type refusalLog struct {
	log    *slog.Logger
	mu     sync.Mutex
	m      map[[2]string]*Refusal
	recent []RecentRefusal // the latest, oldest first, at most recentRefusals
	total  int64
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, m: map[[2]string]*Refusal{}}
}

func (l *refusalLog) note(source, reason, answer, key, detail string, n int) {
	now := time.Now()
	detail = clipText(detail, maxReason)
	key = clipText(key, 2*event.MaxKeyLen)
	l.mu.Lock()
	k := [2]string{source, reason}
	r := l.m[k]
	if r == nil {
		r = &Refusal{Source: source, Reason: reason, First: now}
		l.m[k] = r
	}
	r.Count += int64(n)
	l.total += int64(n)
	r.Last, r.Answer, r.Detail = now, answer, detail
	if len(l.recent) == recentRefusals {
		l.recent = append(l.recent[:0], l.recent[1:]...)
	}
	l.recent = append(l.recent, RecentRefusal{Time: now, Source: source, Reason: reason, Count: n, Key: key, Answer: answer, Detail: detail})
	if !r.logged.IsZero() && now.Sub(r.logged) < refusalEvery {
		r.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed, total := r.suppressed, r.Count
	r.logged, r.suppressed = now, 0
	l.mu.Unlock()
	l.log.Warn("message refused", "source", source, "reason", reason, "answer", answer, "key", key, "detail", detail,
		"more_since_last_logged", suppressed, "total", total)
}

// RecentRefusals returns the latest refused messages (at most 20), the most
// recent first.
func (p *Pipeline) RecentRefusals() []RecentRefusal {
	l := p.refusals
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]RecentRefusal, len(l.recent))
	for i, r := range l.recent {
		out[len(out)-1-i] = r
	}
	return out
}

// RefusedTotal is how many messages were refused since the pipeline
// started: the sum of cairn_intake_rejected_total's series of this pipeline.
func (p *Pipeline) RefusedTotal() int64 {
	l := p.refusals
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Refusals returns the messages refused since the pipeline started, per
// source and reason, the most recent first.
func (p *Pipeline) Refusals() []Refusal {
	l := p.refusals
	l.mu.Lock()
	out := make([]Refusal, 0, len(l.m))
	for _, r := range l.m {
		c := *r
		c.logged, c.suppressed = time.Time{}, 0
		out = append(out, c)
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b Refusal) int { return b.Last.Compare(a.Last) })
	return out
}
