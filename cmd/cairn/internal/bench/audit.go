package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cairn-s3/cairn/audit"
	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

// AuditOptions configures Audit. Store is required; zero fields take the
// defaults.
type AuditOptions struct {
	// Store holds the audited objects, under cairn-bench-audit/N/.
	Store *objstore.Store
	// StoreURL names the store in the results and in how to clean up by hand.
	StoreURL string
	// Objects is how many objects are audited (default 100000).
	Objects int
	// Progress gets a line before slow setup and one when the objects are
	// removed, or what could not be removed and how to remove it (default:
	// none).
	Progress io.Writer
}

// Audit writes Objects small objects under cairn-bench-audit/N/ (reused if an
// earlier run that was killed left exactly that many there), records them in
// a fresh SQLite ledger as processed, then times a bare LIST of the prefix
// and a dry-run audit of it, and reports the ratio and the audit's peak Go
// heap. When it returns, on success, error or a cancelled ctx alike, it has
// deleted every object under the prefix, or says on Progress what it could
// not delete.
func Audit(ctx context.Context, opts AuditOptions) (results []Result, err error) {
	s, objects := opts.Store, opts.Objects
	if objects <= 0 {
		objects = 100000
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	prefix := fmt.Sprintf("cairn-bench-audit/%d/", objects)
	// Deferred first, so it runs last (after the ledger is closed), with a
	// context of its own: an interrupt cancels ctx, and the objects must
	// still go.
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("bench audit interrupted: %w", ctx.Err())
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		n, cerr := removeObjects(cctx, s, prefix)
		if cerr != nil {
			fmt.Fprintf(progress, "cairn: bench audit: removed %d objects under %s but not all: %s; delete the rest with: cairn fs rm --store '%s' %s\n",
				n, safetext.Escape(prefix), oneLine(cerr.Error(), 200), safetext.URL(opts.StoreURL), safetext.Escape(prefix))
			if err == nil {
				err = fmt.Errorf("bench audit: removing its objects under %s: %w", prefix, cerr)
			}
			return
		}
		fmt.Fprintf(progress, "removed the %d benchmark objects under %s\n", n, safetext.Escape(prefix))
	}()
	have := 0
	for _, err := range s.List(ctx, prefix, nil) {
		if err != nil {
			return nil, err
		}
		have++
	}
	if have != objects {
		fmt.Fprintf(progress, "writing %d objects under %s (removed at the end)…\n", objects, safetext.Escape(prefix))
		if _, err := removeObjects(ctx, s, prefix); err != nil {
			return nil, err
		}
		if err := writeObjects(ctx, s, prefix, objects); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp("", "cairn-bench-audit-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	l, err := ledger.Open(ctx, filepath.Join(tmp, "ledger.db"), nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	// The ledger holds every object, processed.
	var batch []event.Event
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := l.Record(ctx, "bench", batch); err != nil {
			return err
		}
		batch = batch[:0]
		for {
			cs, err := l.Claim(ctx, 5000, time.Hour)
			if err != nil || len(cs) == 0 {
				return err
			}
			if _, err := l.CompleteBatch(ctx, cs, make([]string, len(cs))); err != nil {
				return err
			}
		}
	}
	for info, err := range s.List(ctx, prefix, nil) {
		if err != nil {
			return nil, err
		}
		batch = append(batch, event.Event{Bucket: "bench", Key: info.Key, ETag: info.ETag, Size: info.Size, Sequencer: "01", Kind: event.Created})
		if len(batch) == 10000 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	// The audit opens the ledger afresh, as `cairn audit` does: the heap
	// measured is the audit's, not rows the filling left in this handle.
	if err := l.Close(); err != nil {
		return nil, err
	}
	if l, err = ledger.Open(ctx, filepath.Join(tmp, "ledger.db"), nil); err != nil {
		return nil, err
	}
	defer l.Close()
	start := time.Now()
	n := 0
	for _, err := range s.List(ctx, prefix, nil) {
		if err != nil {
			return nil, err
		}
		n++
	}
	bare := time.Since(start)
	var rep *audit.Report
	start = time.Now()
	peak, err := peakHeap(func() error {
		var err error
		rep, err = audit.Run(ctx, s, l, "bench", &audit.Options{Prefixes: []string{prefix}, Grace: time.Nanosecond, DryRun: true})
		return err
	})
	if err != nil {
		return nil, err
	}
	took := time.Since(start)
	if rep.Listed != int64(n) || rep.Counts[audit.Missing]+rep.Counts[audit.Changed]+rep.Counts[audit.Gone] != 0 {
		return nil, fmt.Errorf("audit listed %d of %d objects with findings %v: the bench's ledger is wrong", rep.Listed, n, rep.Counts)
	}
	r := NewResult(fmt.Sprintf("audit of %d objects on %s (ledger holding them) vs a bare LIST", n, safetext.URL(opts.StoreURL)), "seconds",
		bare.Seconds(), took.Seconds())
	r.Lower = true
	r.BaselineDesc, r.CairnDesc = "bare LIST", "cairn audit (LIST + ledger lookups + the ledger walk for gone objects)"
	r.Note = fmt.Sprintf("audit peak Go heap %.1f MiB", float64(peak)/(1<<20))
	return []Result{r}, nil
}

// oneLine is s on one line, cut to n runes.
func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if utf8.RuneCountInString(s) > n {
		return string([]rune(s)[:n-1]) + "…"
	}
	return s
}
