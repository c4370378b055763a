package intake

import (
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/event"
)

// A body of many bad records (4 MiB of "{}," is over a million) is answered
// and kept with its first maxListedRejections named and the rest counted:
// neither the webhook's answer nor the kept reason grows with it.
func TestManyRejectionsAreBounded(t *testing.T) {
	t.Parallel()
	body := `{"Records":[` + strings.TrimSuffix(strings.Repeat(`{},`, 20000), ",") + `]}`
	evs, rejected, err := event.ParseAll([]byte(body))
	if err != nil || len(evs) != 0 || len(rejected) != 20000 {
		t.Fatalf("ParseAll: %d events, %d rejected, %v", len(evs), len(rejected), err)
	}
	if got := rejections(rejected); len(got) != maxListedRejections {
		t.Fatalf("the answer names %d refused records, want %d", len(got), maxListedRejections)
	}
	ev, ok := RefusedEvent([]byte(body), err, rejected)
	if !ok || !strings.HasPrefix(ev.RequestID, "20000 records refused: ") || len(ev.RequestID) > maxReason+len("…") {
		t.Fatalf("kept reason %.80q… (%d bytes)", ev.RequestID, len(ev.RequestID))
	}
}
