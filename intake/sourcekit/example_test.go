package sourcekit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake/sourcekit"
	"github.com/cairn-s3/cairn/ledger"
)

// slowSink is a Sink whose ledger takes a while: its Submit returns once the
// source has extended its broker's redelivery timer twice.
type slowSink struct{ extendedTwice chan struct{} }

func (s slowSink) Submit(ctx context.Context, source string, evs []event.Event) ([]ledger.Decision, error) {
	<-s.extendedTwice
	return make([]ledger.Decision, len(evs)), nil
}

func (s slowSink) Refused(source string, n int) {}

// A pull source extends its broker's redelivery timer (SQS visibility, NATS
// InProgress) while the ledger records a delivery, and acknowledges the
// delivery once Submit returned.
func ExampleSubmitKeepingAlive() {
	sink := slowSink{extendedTwice: make(chan struct{})}
	evs := []event.Event{{Bucket: "photos", Key: "cats/tom.jpg", Sequencer: "0001", Kind: event.Created}}
	extensions := 0
	ds, err := sourcekit.SubmitKeepingAlive(context.Background(), sink, "example", evs, time.Millisecond, func() {
		extensions++ // e.g. ChangeMessageVisibility
		if extensions == 2 {
			close(sink.extendedTwice)
		}
	})
	if err != nil {
		return // not acknowledged: the broker delivers it again
	}
	fmt.Println("decisions:", len(ds), "extended while recording:", extensions >= 2)
	// Output:
	// decisions: 1 extended while recording: true
}
