package natssrc_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/intake/natssrc"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
)

// sink records what it is given.
type sink struct {
	mu      sync.Mutex
	keys    []string
	kept    []string // refused messages (event names)
	refused int      // messages refused without being submitted (Refused)
}

func (s *sink) Submit(_ context.Context, _ string, evs []event.Event) ([]ledger.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if ev.Bucket == intake.RefusedBucket {
			s.kept = append(s.kept, ev.Name)
			continue
		}
		s.keys = append(s.keys, ev.Key)
	}
	return make([]ledger.Decision, len(evs)), nil
}

// Refused counts messages refused without being submitted: the NATS source
// keeps every poison message as a refused message (RefusedEvent) instead.
func (s *sink) Refused(_ string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused += n
}

func (s *sink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

func rec(key string) string {
	return `{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"bkt"},"object":{"key":"` + key + `","size":1,"sequencer":"0A"}}}`
}

// A poison message (garbage, or only bad records) is kept as a refused
// message and acknowledged, never redelivered, and never holds up the
// messages behind it; a message with good and bad records has its good ones
// recorded (and is kept too).
func TestPoisonMessages(t *testing.T) {
	t.Parallel()
	natsURL := testenv.NATS(t)
	// The ack wait is long: a message is judged acknowledged by the
	// consumer's state, not by waiting out a redelivery timer, so a source
	// slowed down by a loaded machine is not redelivered (and counted twice)
	// merely for being slow. A message left unacknowledged stays pending and
	// fails the wait below; one sent back (nak) is counted as redelivered.
	src, err := natssrc.Open(t.Context(), natsURL, "EV", &natssrc.Options{Subject: "ev", AckWait: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, s) }()
	defer func() { cancel(); <-done }()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	// The source creates the stream; wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := js.StreamInfo("EV"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the source did not create its stream")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, body := range []string{
		`not json at all`,
		`{"Records":[` + rec("bad%00key") + `]}`,
		`{"Records":[` + rec("mixed-good") + `,` + rec("mixed%00bad") + `]}`,
		`{"Records":[` + rec("after") + `]}`,
	} {
		if _, err := js.Publish("ev", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(15 * time.Second)
	for !strings.Contains(strings.Join(s.got(), ","), "after") {
		if time.Now().After(deadline) {
			t.Fatalf("the message after the poison ones was not delivered: %v", s.got())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every message acknowledged (or terminated): none pending delivery, none
	// waiting for its ack, the ack floor at the last one.
	var ci *nats.ConsumerInfo
	deadline = time.Now().Add(30 * time.Second)
	for {
		ci, err = js.ConsumerInfo("EV", "cairn")
		if err != nil {
			t.Fatal(err)
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer: %d undelivered, %d pending acks, ack floor %d of 4: poison messages must be acknowledged once kept", ci.NumPending, ci.NumAckPending, ci.AckFloor.Stream)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ci.NumRedelivered != 0 {
		t.Fatalf("consumer: %d redelivered; poison messages must be acknowledged once kept, never sent back", ci.NumRedelivered)
	}
	if got := strings.Join(s.got(), ","); got != "mixed-good,after" {
		t.Fatalf("recorded %q, want mixed-good,after (each once)", got)
	}
	s.mu.Lock()
	kept := strings.Join(s.kept, ",")
	refused := s.refused
	s.mu.Unlock()
	if refused != 0 {
		t.Fatalf("%d messages refused without being kept as refused messages", refused)
	}
	if want := "cairn:Refused:UnknownFormat,cairn:Refused:Malformed,cairn:Refused:Malformed"; kept != want {
		t.Fatalf("kept %q, want each poison message (and the mixed one) kept once as a refused message: %s", kept, want)
	}
}
