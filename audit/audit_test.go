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
	"testing"
	"time"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testenv"
	"github.com/cairn-s3/cairn/internal/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/sqlite"
	"github.com/cairn-s3/cairn/objstore"
	fsstore "github.com/cairn-s3/cairn/objstore/fs"
	"github.com/cairn-s3/cairn/objstore/mem"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// processAll claims and completes every piece of work, returning what ran.
func processAll(t *testing.T, l ledger.Ledger) map[string]ledger.Claim {
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
			s, err := fsstore.New(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"minio": func(t *testing.T) *objstore.Store {
			b, _ := testenv.NewBucket(t, testenv.S3(t))
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
			base := audit.Options{Store: s, Ledger: l, Bucket: "bkt"}
			run := func(mod func(*audit.Options)) *audit.Report {
				o := base
				mod(&o)
				rep, err := audit.Run(ctx, o)
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
			// An hour later, dry run: exactly the lost ones, nothing recorded.
			rep = run(func(o *audit.Options) { o.Now, o.DryRun = later, true })
			if rep.Counts[audit.Missing] != 5 || rep.Counts[audit.Changed] != 3 || rep.Counts[audit.Gone] != 2 || rep.Resubmitted != 0 || rep.Listed != 43 {
				t.Fatalf("dry run: %+v (listed %d)", rep.Counts, rep.Listed)
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
			if rep.Resubmitted != 10 || rep.Decisions[string(ledger.New)] != 10 {
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
	inv := mem.New()
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
	rep, err := audit.Run(ctx, audit.Options{Store: inv, Ledger: l, Bucket: bucket, Objects: objs, Prefixes: []string{"photos/"}})
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
			_, err = audit.Run(ctx, audit.Options{Store: inv, Ledger: l, Bucket: "src", Objects: objs})
		}
		if !errors.Is(err, audit.ErrInventory) {
			t.Errorf("%s: %v, want ErrInventory", name, err)
		}
	}
}
