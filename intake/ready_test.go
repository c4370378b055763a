package intake_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/intake"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/faulty"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// readyz returns /readyz's status and its error text.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r.Error
}

// TestReadyzFollowsRecording: on a full disk the ledger still answers reads
// while every webhook answers 503; /readyz must say so too (a load balancer
// can then take the instance out), but not after one failed delivery, and it
// is ready again once recording works. The full disk is the object-store
// ledger on a store that refuses writes (faulty.Full) and, where the test
// can mount one, the SQLite ledger on a real full tmpfs.
func TestReadyzFollowsRecording(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// open returns a ledger and the functions that fill and free its disk.
		open func(t *testing.T) (l *ledger.Ledger, fill, free func())
	}{
		{"object-store ledger, injected", func(t *testing.T) (*ledger.Ledger, func(), func()) {
			var full atomic.Bool
			b := faulty.New(mem.OpenBackend(""), &faulty.Options{Rule: func(faulty.Op, string) (faulty.Fault, time.Duration) {
				if full.Load() {
					return faulty.Full, 0
				}
				return faulty.None, 0
			}})
			l, err := objledger.Open(context.Background(), objstore.New(b, nil), nil, &objledger.Options{Shards: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l, func() { full.Store(true) }, func() { full.Store(false) }
		}},
		{"SQLite ledger, full tmpfs", func(t *testing.T) (*ledger.Ledger, func(), func()) {
			disk := testenv.SmallDisk(t, 4<<20)
			l, err := sqlite.Open(context.Background(), filepath.Join(disk, "ledger.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			var free func()
			return l, func() { free = testenv.FillDisk(t, disk) }, func() { free() }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, fill, free := tc.open(t)
			srv, _ := webhookServer(t, l, intake.HandlerFunc(func(context.Context, intake.Work) (string, error) { return "", nil }))
			url := srv.URL + "/v1/events"
			seq := 0
			deliver := func() int {
				// Many keys, so that a write cannot fit in pages the
				// database already holds.
				var evs []event.Event
				for i := range 50 {
					seq++
					evs = append(evs, ev(strings.Repeat("k", 100)+string(rune('a'+i%26))+string(rune('a'+seq%26)), seq))
				}
				status, _ := post(t, url, "tok", event.S3Body(evs...))
				return status
			}
			if s := deliver(); s != 200 {
				t.Fatalf("delivery before the disk filled: %d", s)
			}
			fill()
			if s := deliver(); s != http.StatusServiceUnavailable {
				t.Fatalf("delivery on a full disk: %d, want 503", s)
			}
			if s, why := readyz(t, srv.URL); s != 200 {
				t.Fatalf("readyz after one failed delivery: %d (%s), want 200: one failure is not enough", s, why)
			}
			for range 2 {
				if s := deliver(); s != http.StatusServiceUnavailable {
					t.Fatalf("delivery on a full disk: %d, want 503", s)
				}
			}
			if s, why := readyz(t, srv.URL); s != http.StatusServiceUnavailable || !strings.Contains(why, "attempts to record events failed") ||
				!strings.Contains(why, "is full: free space and retry") {
				t.Fatalf("readyz while every delivery fails: %d %q, want 503 saying recording fails because the disk is full", s, why)
			}
			free()
			if s := deliver(); s != 200 {
				t.Fatalf("delivery after space was freed: %d", s)
			}
			if s, why := readyz(t, srv.URL); s != 200 {
				t.Fatalf("readyz once recording works again: %d (%s)", s, why)
			}
		})
	}
}
