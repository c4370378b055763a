package audit_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/objledger"
	"github.com/cairn-s3/cairn/ledger/postgres"
	"github.com/cairn-s3/cairn/ledger/sqlite"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/fsstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// processAll claims and completes every piece of work, returning what ran.
func processAll(t *testing.T, l *ledger.Ledger) map[string]ledger.Claim {
	t.Helper()
	ran := map[string]ledger.Claim{}
	for {
		cs, err := l.Claim(context.Background(), 500, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			return ran
		}
		for _, c := range cs {
			ran[c.Key] = c
		}
		if _, err := l.CompleteBatch(context.Background(), cs, make([]string, len(cs))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAudit(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) *objstore.Store{
		"fs": func(t *testing.T) *objstore.Store {
			s, err := fsstore.Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"minio": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3(t))
			return objstore.New(b, nil)
		},
		"versitygw": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3Server(t, "versitygw"))
			return objstore.New(b, nil)
		},
		"gofakes3": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3Server(t, "gofakes3"))
			return objstore.New(b, nil)
		},
		"seaweedfs": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3Server(t, "seaweedfs"))
			return objstore.New(b, nil)
		},
		"ceph": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3Server(t, "ceph"))
			return objstore.New(b, nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := mk(t)
			l, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "l.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			put := func(k, body string) objstore.Info {
				info, err := s.PutBytes(ctx, k, []byte(body), nil)
				if err != nil {
					t.Fatal(err)
				}
				return info
			}
			// 40 objects whose events arrived and were processed.
			var evs []event.Event
			for i := range 40 {
				k := fmt.Sprintf("d%d/ünï %02d+.txt", i%4, i)
				info := put(k, k)
				evs = append(evs, event.Event{Bucket: "bkt", Key: k, ETag: info.ETag, Size: info.Size, Sequencer: fmt.Sprintf("%04X", i+1),
					Kind: event.Created, Time: time.Now(), Format: event.FormatS3})
			}
			if _, err := l.Record(ctx, "webhook", evs); err != nil {
				t.Fatal(err)
			}
			processAll(t, l)
			// Lost events: 5 new objects, 3 overwrites, 2 deletes.
			want := map[string]string{}
			for i := range 5 {
				k := fmt.Sprintf("d9/lost %d", i)
				want[k] = put(k, "lost").ETag
			}
			for i := range 3 {
				want[evs[i].Key] = put(evs[i].Key, "overwritten").ETag
			}
			for i := 3; i < 5; i++ {
				if err := s.Delete(ctx, evs[i].Key, objstore.Condition{}); err != nil {
					t.Fatal(err)
				}
				want[evs[i].Key] = ""
			}
			base := audit.Options{Grace: -1} // -1: the default grace
			run := func(mod func(*audit.Options)) *audit.Report {
				o := base
				mod(&o)
				rep, err := audit.Run(ctx, s, l, "bkt", &o)
				if err != nil {
					t.Fatal(err)
				}
				return rep
			}
			later := func() time.Time { return time.Now().Add(time.Hour) }

			// Now, everything is too young to judge: no false positives.
			rep := run(func(o *audit.Options) {})
			if rep.Resubmitted != 0 || rep.Counts[audit.Missing]+rep.Counts[audit.Changed]+rep.Counts[audit.Gone] != 0 {
				t.Fatalf("young objects judged: %+v", rep.Counts)
			}
			// An hour later, dry run: exactly the lost ones, nothing recorded; it
			// counts what the real run below resubmits.
			rep = run(func(o *audit.Options) { o.Now, o.DryRun = later, true })
			if rep.Counts[audit.Missing] != 5 || rep.Counts[audit.Changed] != 3 || rep.Counts[audit.Gone] != 2 || rep.Resubmitted != 10 || rep.Listed != 43 {
				t.Fatalf("dry run: %+v (listed %d, would resubmit %d, want 10)", rep.Counts, rep.Listed, rep.Resubmitted)
			}
			if len(rep.Decisions) != 0 {
				t.Fatalf("dry run has ledger decisions: %v", rep.Decisions)
			}
			if c, _ := l.Counts(ctx); c[ledger.Pending] != 0 {
				t.Fatalf("a dry run recorded work: %v", c)
			}
			// Past the retention horizon, missing objects are not resubmitted
			// (their records may have been purged).
			rep = run(func(o *audit.Options) { o.Now, o.DryRun, o.Horizon = later, true, 30*time.Minute })
			if rep.Counts[audit.Missing] != 0 || rep.Counts[audit.TooOld] != 5 {
				t.Fatalf("horizon: %+v", rep.Counts)
			}
			// The real run, fanned out over the folders.
			rep = run(func(o *audit.Options) { o.Now, o.Parallel = later, 4 })
			if rep.Resubmitted != 10 || rep.Decisions[string(ledger.Accepted)] != 10 {
				t.Fatalf("audit: %+v decisions %v", rep.Counts, rep.Decisions)
			}
			ran := processAll(t, l)
			if len(ran) != len(want) {
				t.Fatalf("resubmitted work ran for %d keys, want %d", len(ran), len(want))
			}
			for k, etag := range want {
				c, ok := ran[k]
				switch {
				case !ok:
					t.Errorf("%s: not resubmitted", k)
				case etag == "" && c.Kind != event.Removed:
					t.Errorf("%s: deleted, resubmitted as %s", k, c.Kind)
				case etag != "" && (c.ETag != etag || c.Kind != event.Created):
					t.Errorf("%s: resubmitted %s %s, want created %s", k, c.Kind, c.ETag, etag)
				}
				// What the handler sees: no sequencer (the record's belongs to
				// the earlier event), the reason in the name.
				wantName := "cairn:Audit:Missing"
				switch {
				case etag == "":
					wantName = "cairn:Audit:Gone"
				case !strings.HasPrefix(k, "d9/"):
					wantName = "cairn:Audit:Changed"
				}
				if ev := c.Event(); ev.Sequencer != "" || ev.Name != wantName || c.Source != "audit" || ev.Format != event.FormatAudit {
					t.Errorf("%s: handler sees sequencer %q, name %q, format %q, source %q; want none, %s, audit, audit",
						k, ev.Sequencer, ev.Name, ev.Format, c.Source, wantName)
				}
			}
			// Reconciled: a second audit finds nothing.
			rep = run(func(o *audit.Options) { o.Now = later })
			if rep.Resubmitted != 0 || len(rep.Findings) != 0 {
				t.Fatalf("after reconciliation: %+v %+v", rep.Counts, rep.Findings)
			}
		})
	}
}

// TestInventory: an S3 Inventory report (manifest + gzipped CSV, keys
// URL-encoded, a delete marker and an old version among the rows) stands in
// for the LIST.
func TestInventory(t *testing.T) {
	ctx := context.Background()
	inv := mem.Open()
	var csvData bytes.Buffer
	zw := gzip.NewWriter(&csvData)
	mod := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
	rows := [][]string{
		{"src", url.QueryEscape("photos/ünï cat.jpg"), "", "true", "false", "10", mod, "etag-cat"},
		{"src", url.QueryEscape("photos/dog.jpg"), "", "true", "false", "11", mod, "etag-dog"},
		{"src", url.QueryEscape("photos/gone.jpg"), "v2", "true", "true", "0", mod, ""},          // delete marker
		{"src", url.QueryEscape("photos/dog.jpg"), "v0", "false", "false", "9", mod, "etag-old"}, // older version
		{"src", url.QueryEscape("other/x"), "", "true", "false", "1", mod, "etag-x"},
	}
	w := csv.NewWriter(zw)
	if err := w.WriteAll(rows); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	if _, err := inv.PutBytes(ctx, "inv/src/data/1.csv.gz", csvData.Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	man := `{"sourceBucket":"src","fileFormat":"CSV","fileSchema":"Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag",
"files":[{"key":"inv/src/data/1.csv.gz"}]}`
	if _, err := inv.PutBytes(ctx, "inv/src/manifest.json", []byte(man), nil); err != nil {
		t.Fatal(err)
	}
	bucket, objs, err := audit.Inventory(ctx, inv, "inv/src/manifest.json")
	if err != nil || bucket != "src" {
		t.Fatal(bucket, err)
	}
	l, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "l.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Record(ctx, "webhook", []event.Event{{Bucket: "src", Key: "photos/dog.jpg", ETag: "etag-dog", Sequencer: "01", Kind: event.Created}}); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Run(ctx, inv, l, bucket, &audit.Options{Objects: objs, Prefixes: []string{"photos/"}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Listed != 2 || rep.Counts[audit.Missing] != 1 || rep.Resubmitted != 1 || rep.Findings[0].Key != "photos/ünï cat.jpg" {
		t.Fatalf("inventory audit: listed %d, %+v, %+v", rep.Listed, rep.Counts, rep.Findings)
	}
	// Bad reports are refused with the reason.
	for name, m := range map[string]string{
		"parquet":    `{"fileFormat":"Parquet","fileSchema":"Key, Size, LastModifiedDate, ETag","files":[]}`,
		"no etag":    `{"fileFormat":"CSV","fileSchema":"Bucket, Key, Size, LastModifiedDate","files":[]}`,
		"not json":   `<xml/>`,
		"no such gz": `{"fileFormat":"CSV","fileSchema":"Bucket, Key, Size, LastModifiedDate, ETag","files":[{"key":"nope.csv.gz"}]}`,
	} {
		if _, err := inv.PutBytes(ctx, "bad.json", []byte(m), nil); err != nil {
			t.Fatal(err)
		}
		_, objs, err := audit.Inventory(ctx, inv, "bad.json")
		if err == nil {
			_, err = audit.Run(ctx, inv, l, "src", &audit.Options{Objects: objs})
		}
		if !errors.Is(err, audit.ErrInventory) {
			t.Errorf("%s: %v, want ErrInventory", name, err)
		}
	}
}

// ledgers opens a fresh ledger of each backend.
var ledgers = map[string]func(t *testing.T) *ledger.Ledger{
	"sqlite": func(t *testing.T) *ledger.Ledger {
		return testledger.New(t, nil)
	},
	"postgres": func(t *testing.T) *ledger.Ledger {
		l, err := postgres.Open(context.Background(), testenv.PostgresSchema(t, testenv.PGExec), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	},
	"objstore": func(t *testing.T) *ledger.Ledger {
		l, err := objledger.Open(context.Background(), mem.Open(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	},
}

// TestResubmissionRecord: on every ledger backend, an audit resubmission of
// a change whose event was lost reaches the handler without the earlier
// event's sequencer and with its own name, the record keeps what was
// accepted and why, the ledger still orders the key by the real sequencers,
// and a late real event of the same state is a duplicate. A dead record of an
// unchanged object runs again when the audit is asked to resubmit it.
func TestResubmissionRecord(t *testing.T) {
	for name, open := range ledgers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l := open(t)
			s := mem.Open()
			past := time.Now().Add(-time.Hour).UTC()
			changed, err := s.PutBytes(ctx, "k", []byte("written without its event"), nil)
			if err != nil {
				t.Fatal(err)
			}
			dead, err := s.PutBytes(ctx, "dead", []byte("dead"), nil)
			if err != nil {
				t.Fatal(err)
			}
			missing, err := s.PutBytes(ctx, "missing", []byte("lost"), nil)
			if err != nil {
				t.Fatal(err)
			}
			real := []event.Event{
				{Bucket: "bkt", Key: "k", ETag: "earlier", Sequencer: "0A", Kind: event.Created, Name: "ObjectCreated:Put", Time: past, Format: event.FormatS3},
				{Bucket: "bkt", Key: "dead", ETag: dead.ETag, Size: dead.Size, Sequencer: "01", Kind: event.Created, Name: "ObjectCreated:Put", Time: past, Format: event.FormatS3},
			}
			must(t)(l.Record(ctx, "webhook", real))
			cs, err := l.Claim(ctx, 10, time.Minute)
			if err != nil || len(cs) != 2 {
				t.Fatalf("claim: %v %v", cs, err)
			}
			for _, c := range cs {
				if c.Key == "dead" {
					err = l.Fail(ctx, c, "boom", false)
				} else {
					err = l.Complete(ctx, c, "")
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			rep, err := audit.Run(ctx, s, l, "bkt", &audit.Options{Grace: 0, ResubmitFailed: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Resubmitted != 3 || rep.Counts[audit.Changed] != 1 || rep.Counts[audit.Dead] != 1 || rep.Counts[audit.Missing] != 1 {
				t.Fatalf("audit: %+v, resubmitted %d, decisions %v", rep.Counts, rep.Resubmitted, rep.Decisions)
			}
			want := map[string]struct{ name, etag, seq string }{
				"k":       {"cairn:Audit:Changed", changed.ETag, "0A"},
				"dead":    {"cairn:Audit:Dead", dead.ETag, "01"},
				"missing": {"cairn:Audit:Missing", missing.ETag, ""},
			}
			cs, err = l.Claim(ctx, 10, time.Minute)
			if err != nil || len(cs) != 3 {
				t.Fatalf("claim after the audit: %d claims (%v), want 3: %+v", len(cs), err, cs)
			}
			for _, c := range cs {
				w := want[c.Key]
				ev := c.Event()
				if ev.Sequencer != "" || ev.Name != w.name || ev.Format != event.FormatAudit || ev.Kind != event.Created || ev.ETag != w.etag {
					t.Errorf("%s: the handler sees %+v; want no sequencer, %s, created %s", c.Key, ev, w.name, w.etag)
				}
				// Kept for ordering only.
				if c.Seq != w.seq || c.Source != "audit" {
					t.Errorf("%s: record seq %q source %q; want %q audit", c.Key, c.Seq, c.Source, w.seq)
				}
				if err := l.Complete(ctx, c, ""); err != nil {
					t.Fatal(err)
				}
			}
			// The record survives the backend's round trip with the reason.
			for k, w := range want {
				rs, err := l.Get(ctx, "bkt", k)
				if err != nil || len(rs) != 1 {
					t.Fatalf("%s: %v %v", k, rs, err)
				}
				if r := rs[0]; r.Name != w.name || r.Source != "audit" || r.ETag != w.etag || r.Status != ledger.Processed || r.EventTime.IsZero() {
					t.Errorf("%s: stored %+v", k, r)
				}
			}
			// An event older than the one accepted before the audit is stale;
			// the late real events of the states the audit resubmitted are
			// duplicates (no second run), their sequencers adopted.
			late := []event.Event{
				{Bucket: "bkt", Key: "k", ETag: "older", Sequencer: "09", Kind: event.Created, Name: "ObjectCreated:Put", Format: event.FormatS3},
				{Bucket: "bkt", Key: "k", ETag: changed.ETag, Sequencer: "0B", Kind: event.Created, Name: "ObjectCreated:Put", Format: event.FormatS3},
				{Bucket: "bkt", Key: "missing", ETag: missing.ETag, Sequencer: "05", Kind: event.Created, Name: "ObjectCreated:Put", Format: event.FormatS3},
			}
			ds := must(t)(l.Record(ctx, "webhook", late))
			if ds[0].Outcome != ledger.Stale || ds[1].Outcome != ledger.Duplicate || ds[2].Outcome != ledger.Duplicate {
				t.Fatalf("late events: %+v, want stale, duplicate, duplicate", ds)
			}
			if cs, err := l.Claim(ctx, 10, time.Minute); err != nil || len(cs) != 0 {
				t.Fatalf("late real events made work: %+v %v", cs, err)
			}
		})
	}
}

func must(t *testing.T) func([]ledger.Decision, error) []ledger.Decision {
	return func(ds []ledger.Decision, err error) []ledger.Decision {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
}

// TestGrace: a zero grace is zero (every object is judged, however young); a
// negative one is the default.
func TestGrace(t *testing.T) {
	ctx := context.Background()
	s := mem.Open()
	if _, err := s.PutBytes(ctx, "fresh", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	l := ledgers["sqlite"](t)
	for grace, class := range map[time.Duration]string{0: audit.Missing, -1: audit.TooYoung, time.Hour: audit.TooYoung} {
		rep, err := audit.Run(ctx, s, l, "b", &audit.Options{Grace: grace, DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Counts[class] != 1 {
			t.Errorf("grace %v: %v, want %s", grace, rep.Counts, class)
		}
	}
}
