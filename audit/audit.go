// Package audit finds the object changes that notifications never
// announced. S3 event notifications are at-least-once and can be lost; AWS's
// own advice is to reconcile with LIST. An audit lists the bucket (streamed,
// page by page), looks each page's keys up in the ledger in one query, and
// classifies every object:
//
//   - current: the ledger's accepted state is the object's (same ETag);
//   - missing: no record — its event was lost;
//   - changed: the record's ETag differs, or the record says removed — an
//     overwrite or re-creation whose event was lost;
//   - failed / dead: the record's work failed (reported; resubmitted only when
//     asked);
//   - too young: modified within the grace period (its event may still be on
//     its way), skipped;
//   - too old: missing, but older than the ledger's retention horizon (its
//     record may have been purged), skipped;
//
// and then walks the ledger's records under the same prefix to find objects
// that are gone without a removal event.
//
// Missing, changed and gone objects (and failed and dead ones, when asked)
// are resubmitted as events without a sequencer (source "audit", format
// "audit"), stamped with the state the audit saw and when (the object's
// Last-Modified), and named for the reason: "cairn:Audit:Missing",
// "cairn:Audit:Changed", "cairn:Audit:Failed", "cairn:Audit:Dead" (Kind
// created) and "cairn:Audit:Gone" (Kind removed) — see event.AuditPrefix. The
// ledger record keeps that name and source, and a handler sees an empty
// sequencer (CAIRN_SEQUENCER) for such work: S3 never numbered the change, and
// the sequencer the ledger keeps for ordering the key is an earlier event's. A
// handler that deduplicates by (key, sequencer) must not drop these.
//
// The ledger never lets such an event override a newer sequenced one (see
// Decide in package ledger/driver): a real event arriving later for the same
// state is a duplicate, and an audit resubmission older than an event already
// accepted is stale.
//
// # The grace period
//
// Seed 001 used 12 hours because S3 can deliver an event hours late; a
// shorter grace resubmits objects whose events are merely slow, which costs a
// duplicate handler run at worst (the ledger deduplicates the late event by
// state). DefaultGrace (15 minutes) is the CLI's default; use hours where notifications go through
// queues that can back up (SQS with a stopped consumer), minutes where they do
// not. A grace of 0 judges every object however young.
//
// # Errors
//
// Findings are not errors: a lost event is reported in the Report. Run and
// Inventory fail, and a caller checks with errors.Is, on:
//
//   - ErrInventory: Inventory could not use an S3 Inventory manifest or
//     report file (unreadable, not a manifest, not CSV, a field missing, a
//     bad line); Run returns it too when Options.Objects yields it mid-way.
//   - objstore.ErrBucketNotFound (wrapped, naming the prefix): the bucket
//     to list is not there. (A missing Inventory manifest is ErrInventory.)
//   - context.Canceled, context.DeadlineExceeded: ctx ended. What was
//     resubmitted before is recorded in the ledger: running the audit again
//     finds those objects current and resubmits only the rest.
//
// Run also refuses a nil store or ledger and an empty bucket name. Other errors
// are the store's or the ledger's ("audit: listing …", "audit: looking up the
// ledger: …", "audit: resubmitting: …").
package audit

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/objstore"
)

// Classes of finding.
const (
	Current  = "current"
	Missing  = "missing"
	Changed  = "changed"
	Failed   = "failed"
	Dead     = "dead"
	Gone     = "gone"
	TooYoung = "too_young"
	TooOld   = "too_old"
)

// DefaultGrace is the grace period Options.Grace < 0 asks for.
const DefaultGrace = 15 * time.Minute

// EventName is the name of an audit's resubmission for a finding of class
// (Missing, Changed, Failed, Dead or Gone): "cairn:Audit:Missing" and so on.
func EventName(class string) string {
	if class == "" {
		return event.AuditPrefix + "Resubmitted"
	}
	return event.AuditPrefix + strings.ToUpper(class[:1]) + class[1:]
}

// Options configure an audit; nil means the defaults.
type Options struct {
	// Prefixes to audit; default: everything.
	Prefixes []string
	// Grace skips objects modified more recently (their events may still be
	// on their way). 0 skips none; negative: DefaultGrace (15m).
	Grace time.Duration
	// Horizon: missing objects older than this are skipped (the ledger's
	// retention: their records may have been purged). Default 30 days; <0: none.
	Horizon time.Duration
	// DryRun reports without resubmitting; the report's Resubmitted is what
	// a real run would have resubmitted.
	DryRun bool
	// Resubmit also failed and dead records (an explicit request).
	ResubmitFailed bool
	// Parallel lists this many prefixes at once: the audited prefixes' first
	// level of "folders" are fanned out. Default 1 (one listing).
	Parallel int
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
	// Progress, if set, is told the objects listed so far.
	Progress func(listed int64)
	// MaxFindings caps Report.Findings. Default 1000.
	MaxFindings int
	// Skip, if set, leaves out the objects whose key it reports: they are
	// listed (counted in Listed) but neither judged nor resubmitted. cairn
	// serve skips cairn's own objects so (cairn.OwnKey), as its intake does.
	Skip func(key string) bool
	// By names who ran the audit in its Summary. Default: this process,
	// as host/pid; cairn serve's audit job says "serve host/pid".
	By string
	// Objects, if set, replaces the LIST: e.g. the rows of an S3 Inventory
	// report (see Inventory). Objects outside Prefixes are skipped. Gone
	// objects are not looked for (an inventory's rows are not in key order).
	Objects iter.Seq2[objstore.Info, error]
}

// Finding is one object the audit acted on or reports.
type Finding struct {
	Key        string    `json:"key"`
	Class      string    `json:"class"`
	ETag       string    `json:"etag,omitempty"`        // the object's
	LedgerETag string    `json:"ledger_etag,omitempty"` // the record's
	Status     string    `json:"ledger_status,omitempty"`
	Modified   time.Time `json:"modified,omitzero"`
}

// Report is an audit's outcome.
type Report struct {
	Bucket      string         `json:"bucket"`
	Listed      int64          `json:"listed"`
	Counts      map[string]int `json:"counts"`
	Resubmitted int            `json:"resubmitted"`         // with DryRun: would have been
	Decisions   map[string]int `json:"decisions,omitempty"` // the ledger's answers to the resubmissions
	Findings    []Finding      `json:"findings,omitempty"`
	DryRun      bool           `json:"dry_run,omitempty"`
	Started     time.Time      `json:"started"`
	Seconds     float64        `json:"seconds"`
	// SummaryError, if set, says why the audit's Summary could not be kept
	// in the ledger (the audit itself is done).
	SummaryError string `json:"summary_error,omitempty"`
}

type auditor struct {
	s      *objstore.Store
	l      *ledger.Ledger
	bucket string
	o      Options
	now    time.Time
	mu     sync.Mutex
	rep    *Report
}

// Run audits s, the bucket (or a prefix of it) whose events carry the bucket
// name bucket (what the ledger keys records by), against the ledger l, and
// resubmits to l what it finds out of step; opts may be nil (the defaults).
//
// Every audit, finished or failed, then leaves its Summary in the ledger
// (see Summary); Report.SummaryError says if that failed.
func Run(ctx context.Context, s *objstore.Store, l *ledger.Ledger, bucket string, opts *Options) (*Report, error) {
	rep, o, err := run(ctx, s, l, bucket, opts)
	if rep == nil {
		return nil, err
	}
	if serr := recordSummary(ctx, l, rep, o, err); serr != nil {
		rep.SummaryError = serr.Error()
	}
	if err != nil {
		return nil, err
	}
	return rep, nil
}

func run(ctx context.Context, s *objstore.Store, l *ledger.Ledger, bucket string, opts *Options) (*Report, Options, error) {
	if s == nil || l == nil || bucket == "" {
		return nil, Options{}, errors.New("audit: a store, a ledger and a bucket name are required")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Grace < 0 {
		o.Grace = DefaultGrace
	}
	if o.Horizon == 0 {
		o.Horizon = 30 * 24 * time.Hour
	}
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.MaxFindings <= 0 {
		o.MaxFindings = 1000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if len(o.Prefixes) == 0 {
		o.Prefixes = []string{""}
	}
	a := &auditor{s: s, l: l, bucket: bucket, o: o, now: o.Now(), rep: &Report{Bucket: bucket, Counts: map[string]int{}, Decisions: map[string]int{}, DryRun: o.DryRun}}
	a.rep.Started = a.now
	prefixes, err := a.fanOut(ctx)
	if err != nil {
		return a.failed(o, err)
	}
	if o.Objects != nil {
		if err := a.fromObjects(ctx); err != nil {
			return a.failed(o, err)
		}
	} else if o.Parallel <= 1 {
		// One pass: the listing and the ledger, both in key order, merged.
		for _, p := range o.Prefixes {
			if err := a.merge(ctx, p); err != nil {
				return a.failed(o, err)
			}
		}
	} else {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(o.Parallel)
		for _, p := range prefixes {
			g.Go(func() error { return a.listPrefix(gctx, p) })
		}
		if err := g.Wait(); err != nil {
			return a.failed(o, err)
		}
		for _, p := range o.Prefixes {
			if err := a.gone(ctx, p); err != nil {
				return a.failed(o, err)
			}
		}
	}
	slices.SortFunc(a.rep.Findings, func(x, y Finding) int { return strings.Compare(x.Key, y.Key) })
	a.rep.Seconds = time.Since(a.now).Seconds()
	return a.rep, o, nil
}

// failed is an audit stopped by err, with what it had found.
func (a *auditor) failed(o Options, err error) (*Report, Options, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rep.Seconds = time.Since(a.now).Seconds()
	return a.rep, o, err
}

// fromObjects judges Options.Objects under the prefixes.
func (a *auditor) fromObjects(ctx context.Context) error {
	return a.judgeAll(ctx, a.o.Objects, func(key string) bool {
		for _, p := range a.o.Prefixes {
			if strings.HasPrefix(key, p) {
				return true
			}
		}
		return false
	})
}

// judgeAll judges objs, 1,000 at a time, keeping those keep accepts.
func (a *auditor) judgeAll(ctx context.Context, objs iter.Seq2[objstore.Info, error], keep func(string) bool) error {
	var page []objstore.Info
	for info, err := range objs {
		if err != nil {
			return err
		}
		if !keep(info.Key) {
			continue
		}
		page = append(page, info)
		if len(page) == 1000 {
			if err := a.judge(ctx, page); err != nil {
				return err
			}
			page = page[:0]
		}
	}
	if len(page) > 0 {
		return a.judge(ctx, page)
	}
	return nil
}

// fanOut splits the prefixes one level down when listing in parallel:
// objects at the top level are listed as their own prefix-free group.
func (a *auditor) fanOut(ctx context.Context) ([]string, error) {
	if a.o.Parallel <= 1 {
		return a.o.Prefixes, nil
	}
	var out []string
	for _, p := range a.o.Prefixes {
		var subs []string
		for info, err := range a.s.List(ctx, p, &objstore.ListOptions{Delimiter: "/"}) {
			if err != nil {
				return nil, err
			}
			if info.IsPrefix {
				subs = append(subs, info.Key)
			} else {
				// A top-level object: audit it in its own one-key listing.
				subs = append(subs, "\x00"+info.Key)
			}
		}
		out = append(out, subs...)
	}
	return out, nil
}

// listPrefix lists one prefix page by page and judges each page.
func (a *auditor) listPrefix(ctx context.Context, prefix string) error {
	if single, ok := strings.CutPrefix(prefix, "\x00"); ok {
		info, err := a.s.Head(ctx, single)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return a.judge(ctx, []objstore.Info{info})
	}
	list := func(yield func(objstore.Info, error) bool) {
		for info, err := range a.s.List(ctx, prefix, nil) {
			if err != nil {
				err = fmt.Errorf("audit: listing %q: %w", prefix, err)
			}
			if !yield(info, err) || err != nil {
				return
			}
		}
	}
	return a.judgeAll(ctx, list, func(string) bool { return true })
}

// merge lists prefix page by page and, for each page, reads the ledger's
// records of the same key range (both are in byte order: S3 lists so, and the
// ledger's keys compare bytewise): records of listed keys judge the objects,
// and records in the range with no object are gone candidates. One LIST and
// about one ledger query per 1,000 objects, nothing held beyond a page.
func (a *auditor) merge(ctx context.Context, prefix string) error {
	// The listing runs one page ahead of the ledger work, in its own goroutine,
	// so the two overlap.
	type pageMsg struct {
		page  []objstore.Info
		final bool
		err   error
	}
	pages := make(chan pageMsg, 2)
	lctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for range pages { // wait for the lister to stop
		}
	}()
	go func() {
		defer close(pages)
		send := func(m pageMsg) bool {
			select {
			case pages <- m:
				return true
			case <-lctx.Done():
				return false
			}
		}
		var page []objstore.Info
		for info, err := range a.s.List(lctx, prefix, nil) {
			if err != nil {
				send(pageMsg{err: fmt.Errorf("audit: listing %q: %w", prefix, err)})
				return
			}
			page = append(page, info)
			if len(page) == 1000 {
				if !send(pageMsg{page: page}) {
					return
				}
				page = nil
			}
		}
		send(pageMsg{page: page, final: true})
	}()
	after := "" // ledger cursor: past every ident of the keys already judged
	for m := range pages {
		if m.err != nil {
			return m.err
		}
		var err error
		if after, err = a.mergePage(ctx, prefix, m.page, after, m.final); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// mergePage judges one page of the listing against the ledger's records of
// its key range (after, the page's last key] — to the prefix's end for the
// final page — and returns the cursor for the next page.
func (a *auditor) mergePage(ctx context.Context, prefix string, page []objstore.Info, after string, final bool) (string, error) {
	through := ""
	if !final {
		through = page[len(page)-1].Key
	}
	listed := make(map[string]bool, len(page))
	for _, info := range page {
		listed[info.Key] = true
	}
	recs := map[string]ledger.Record{}
	var orphans []ledger.Claim
	f := ledger.Filter{Bucket: a.bucket, Prefix: prefix, Through: through, AfterBucket: a.bucket, AfterIdent: after, Limit: 1000}
	for {
		rs, err := a.l.List(ctx, f)
		if err != nil {
			return "", fmt.Errorf("audit: reading the ledger: %w", err)
		}
		for _, c := range rs {
			switch prev, ok := recs[c.Key]; {
			case !listed[c.Key]:
				orphans = append(orphans, c)
			case !ok || event.CompareSequencer(c.Seq, prev.Seq) > 0:
				recs[c.Key] = c.Record
			}
		}
		if len(rs) < f.Limit {
			break
		}
		f.AfterIdent = rs[len(rs)-1].Ident
	}
	if len(page) > 0 {
		// Versions of the last key sort after it ("key\x1fversion").
		after = page[len(page)-1].Key + "\x1f\U0010FFFF"
	}
	if err := a.judgeWith(ctx, page, recs); err != nil {
		return "", err
	}
	var cands []ledger.Claim
	for _, c := range orphans {
		if c.Kind == event.Created && c.Status == ledger.Processed && a.now.Sub(c.Updated) >= a.o.Grace {
			cands = append(cands, c)
		}
	}
	return after, a.confirmGone(ctx, cands)
}

// judge classifies a page of objects and resubmits what needs it.
func (a *auditor) judge(ctx context.Context, page []objstore.Info) error {
	keys := make([]string, len(page))
	for i, info := range page {
		keys[i] = info.Key
	}
	recs, err := a.l.Lookup(ctx, a.bucket, keys)
	if err != nil {
		return fmt.Errorf("audit: looking up the ledger: %w", err)
	}
	return a.judgeWith(ctx, page, recs)
}

// judgeWith classifies a page against its records and resubmits.
func (a *auditor) judgeWith(ctx context.Context, page []objstore.Info, recs map[string]ledger.Record) error {
	var resubmit []event.Event
	var findings []Finding
	for _, info := range page {
		if a.o.Skip != nil && a.o.Skip(info.Key) {
			continue
		}
		f := Finding{Key: info.Key, ETag: info.ETag, Modified: info.LastModified}
		r, ok := recs[info.Key]
		if ok {
			f.LedgerETag, f.Status = r.ETag, string(r.Status)
		}
		switch {
		case a.now.Sub(info.LastModified) < a.o.Grace:
			f.Class = TooYoung
		case !ok && a.o.Horizon > 0 && a.now.Sub(info.LastModified) > a.o.Horizon:
			f.Class = TooOld
		case !ok:
			f.Class = Missing
		case r.Status == ledger.Dead:
			f.Class = Dead
		case r.Status == ledger.Failed:
			f.Class = Failed
		case r.Kind == event.Removed || r.ETag != info.ETag:
			f.Class = Changed
		default:
			f.Class = Current
		}
		if f.Class == Missing || f.Class == Changed || (a.o.ResubmitFailed && (f.Class == Failed || f.Class == Dead)) {
			resubmit = append(resubmit, event.Event{Bucket: a.bucket, Key: info.Key, ETag: info.ETag, Size: info.Size,
				VersionID: info.VersionID, Kind: event.Created, Name: EventName(f.Class), Time: info.LastModified, Format: event.FormatAudit})
		}
		if f.Class != Current {
			findings = append(findings, f)
		}
	}
	return a.record(ctx, int64(len(page)), resubmit, findings)
}

// record resubmits events and adds findings to the report.
func (a *auditor) record(ctx context.Context, listed int64, resubmit []event.Event, findings []Finding) error {
	var ds []ledger.Decision
	if len(resubmit) > 0 && !a.o.DryRun {
		var err error
		if ds, err = a.l.Record(ctx, "audit", resubmit); err != nil {
			return fmt.Errorf("audit: resubmitting: %w", err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rep.Listed += listed
	for _, f := range findings {
		a.rep.Counts[f.Class]++
		if len(a.rep.Findings) < a.o.MaxFindings {
			a.rep.Findings = append(a.rep.Findings, f)
		}
	}
	a.rep.Resubmitted += len(resubmit)
	for _, d := range ds {
		a.rep.Decisions[string(d.Outcome)]++
	}
	if a.o.Progress != nil {
		a.o.Progress(a.rep.Listed)
	}
	return nil
}

// gone walks the ledger's records under prefix and finds processed objects
// that no longer exist (deleted without a removal event): one LIST of the
// key range per page of records.
func (a *auditor) gone(ctx context.Context, prefix string) error {
	f := ledger.Filter{Bucket: a.bucket, Prefix: prefix, Limit: 1000}
	for {
		page, err := a.l.List(ctx, f)
		if err != nil {
			return fmt.Errorf("audit: listing the ledger: %w", err)
		}
		if len(page) == 0 {
			return nil
		}
		f.AfterBucket, f.AfterIdent = page[len(page)-1].Bucket, page[len(page)-1].Ident
		var candidates []ledger.Claim
		for _, c := range page {
			if c.Bucket == a.bucket && c.Kind == event.Created && c.Status == ledger.Processed && a.now.Sub(c.Updated) >= a.o.Grace {
				candidates = append(candidates, c)
			}
		}
		if len(candidates) > 0 {
			if err := a.checkGone(ctx, candidates); err != nil {
				return err
			}
		}
		if len(page) < f.Limit {
			return nil
		}
	}
}

func (a *auditor) checkGone(ctx context.Context, cs []ledger.Claim) error {
	lo, hi := cs[0].Key, cs[0].Key
	for _, c := range cs {
		lo, hi = min(lo, c.Key), max(hi, c.Key)
	}
	exists := map[string]bool{}
	// From just before lo: lo without its last character sorts before it.
	_, size := utf8.DecodeLastRuneInString(lo)
	start := lo[:len(lo)-size]
	for info, err := range a.s.List(ctx, commonPrefix(lo, hi), &objstore.ListOptions{StartAfter: start}) {
		if err != nil {
			return err
		}
		if info.Key > hi {
			break
		}
		exists[info.Key] = true
	}
	var absent []ledger.Claim
	for _, c := range cs {
		if !exists[c.Key] {
			absent = append(absent, c)
		}
	}
	return a.confirmGone(ctx, absent)
}

// confirmGone resubmits removals for records whose objects were absent from
// the listing and still are (a re-creation since is not ours to undo).
func (a *auditor) confirmGone(ctx context.Context, cs []ledger.Claim) error {
	if len(cs) == 0 {
		return nil
	}
	listedAt := a.o.Now()
	var resubmit []event.Event
	var findings []Finding
	for _, c := range cs {
		if _, err := a.s.Head(ctx, c.Key); !errors.Is(err, objstore.ErrNotFound) {
			if err != nil {
				return err
			}
			continue
		}
		findings = append(findings, Finding{Key: c.Key, Class: Gone, LedgerETag: c.ETag, Status: string(c.Status)})
		resubmit = append(resubmit, event.Event{Bucket: a.bucket, Key: c.Key, VersionID: c.VersionID, Kind: event.Removed,
			Name: EventName(Gone), Time: listedAt, Format: event.FormatAudit})
	}
	return a.record(ctx, 0, resubmit, findings)
}

func commonPrefix(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	// Back up to a whole UTF-8 character.
	for n > 0 && n < len(a) && a[n]&0xC0 == 0x80 {
		n--
	}
	return a[:n]
}
