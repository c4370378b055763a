package objledger

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// row is a record as stored: the fields of ledger.Record, with times in unix
// milliseconds (0: none) and short JSON names (a head holds up to CompactAt
// rows and is rewritten on every write). The JSON names are the stored
// format: never change them.
type row struct {
	Bucket      string `json:"b"`
	Ident       string `json:"i,omitempty"` // when it is not the key
	Key         string `json:"k"`
	VersionID   string `json:"v,omitempty"`
	ETag        string `json:"e,omitempty"`
	Size        int64  `json:"z,omitempty"`
	Kind        string `json:"kd,omitempty"`
	Name        string `json:"n,omitempty"`
	EventTime   int64  `json:"t,omitempty"`
	Seq         string `json:"q,omitempty"`
	Status      string `json:"st"`
	Attempts    int    `json:"at,omitempty"`
	Token       int64  `json:"tk,omitempty"`
	LeaseUntil  int64  `json:"l,omitempty"`
	NextAttempt int64  `json:"nx,omitempty"`
	FirstSeen   int64  `json:"f,omitempty"`
	Updated     int64  `json:"u,omitempty"`
	Seen        int    `json:"sn,omitempty"`
	Stale       int    `json:"sl,omitempty"`
	LastError   string `json:"er,omitempty"`
	Result      string `json:"r,omitempty"`
	Source      string `json:"so,omitempty"`
	Gen         int64  `json:"g,omitempty"`
	RunGen      int64  `json:"rg,omitempty"`
	Replays     int    `json:"rp,omitempty"`
	// The accepted event's format, region, request and host IDs (absent in
	// rows written before).
	Format    string `json:"fm,omitempty"`
	Region    string `json:"rn,omitempty"`
	RequestID string `json:"rq,omitempty"`
	HostID    string `json:"hi,omitempty"`
	// Change is the head change counter when the row last changed (compaction
	// removes from the head only rows unchanged since it read them).
	Change int64 `json:"ch,omitempty"`
	// Deleted marks a tombstone: the record was purged (it may still be in the base).
	Deleted bool `json:"del,omitempty"`
}

func (r *row) ident() string {
	if r.Ident != "" {
		return r.Ident
	}
	return r.Key
}

func id(bucket, ident string) string { return bucket + "/" + ident }

func ms(t time.Time) int64     { return driver.UnixMilli(t) }
func fromMS(v int64) time.Time { return driver.FromUnixMilli(v) }

func toRow(ident string, r *ledger.Record) *row {
	w := &row{Bucket: r.Bucket, Key: r.Key, VersionID: r.VersionID, ETag: r.ETag, Size: r.Size, Kind: string(r.Kind), Name: r.Name, EventTime: ms(r.EventTime),
		Seq: r.Seq, Status: string(r.Status), Attempts: r.Attempts, Token: r.Token, LeaseUntil: ms(r.LeaseUntil), NextAttempt: ms(r.NextAttempt), FirstSeen: ms(r.FirstSeen),
		Updated: ms(r.Updated), Seen: r.Seen, Stale: r.Stale, LastError: r.LastError, Result: r.Result, Source: r.Source, Gen: r.Gen, RunGen: r.RunGen, Replays: r.Replays,
		Format: string(r.Format), Region: r.Region, RequestID: r.RequestID, HostID: r.HostID}
	if ident != r.Key {
		w.Ident = ident
	}
	return w
}

func (r *row) record() ledger.Record {
	return ledger.Record{Bucket: r.Bucket, Key: r.Key, VersionID: r.VersionID, ETag: r.ETag, Size: r.Size, Kind: event.Kind(r.Kind), Name: r.Name,
		EventTime: fromMS(r.EventTime), Seq: r.Seq, Status: ledger.Status(r.Status), Attempts: r.Attempts, Token: r.Token, LeaseUntil: fromMS(r.LeaseUntil),
		NextAttempt: fromMS(r.NextAttempt), FirstSeen: fromMS(r.FirstSeen), Updated: fromMS(r.Updated), Seen: r.Seen, Stale: r.Stale, LastError: r.LastError,
		Result: r.Result, Source: r.Source, Gen: r.Gen, RunGen: r.RunGen, Replays: r.Replays,
		Format: event.Format(r.Format), Region: r.Region, RequestID: r.RequestID, HostID: r.HostID}
}

func (r *row) claim() ledger.Claim { return ledger.Claim{Record: r.record(), Ident: r.ident()} }

// due is when the row's work can next be claimed, and whether it has any.
func (r *row) due() (int64, bool) {
	switch ledger.Status(r.Status) {
	case ledger.Pending, ledger.Failed:
		return r.NextAttempt, true
	case ledger.Claimed:
		return r.LeaseUntil, true
	}
	return 0, false
}

// less orders rows as the SQL backends list them: by bucket, then ident.
func less(a, b *row) int {
	return cmp.Or(strings.Compare(a.Bucket, b.Bucket), strings.Compare(a.ident(), b.ident()))
}

// head is a shard's mutable document.
type head struct {
	Base string `json:"base,omitempty"` // key of the oldest segment, which holds no tombstones ("" = none yet)
	// Segs are newer immutable segments, oldest first: each holds the rows
	// (and tombstones) a compaction moved out of the head, newer than Base
	// and than the segments before it.
	Segs []string        `json:"segs,omitempty"`
	Seq  int64           `json:"seq"`  // change counter
	Rows map[string]*row `json:"rows"` // id → row changed since the segments (or tombstone)
	// Work is every pending, failed or claimed row's due time (ms), by id.
	// Not stored (format 3): it is derived from the rows when a head is
	// decoded and kept in step by put and remove, so a head write carries
	// the rows changed since its segments, not the shard's whole backlog.
	// (Format 1 and 2 heads stored it as "work"; it is ignored on read.)
	Work  workSet `json:"-"`
	Trash []trash `json:"trash,omitempty"`

	base *segment   // the decoded base (not stored)
	segs []*segment // the decoded Segs (not stored)
}

// trash is a replaced segment, deleted once its grace period is over.
type trash struct {
	Key   string `json:"key"`
	Since int64  `json:"since"`
}

// segment is an immutable set of rows: the base, or a newer segment (which
// may hold tombstones).
type segment struct {
	Rows map[string]*row `json:"rows"`
}

func (h *head) clone() *head {
	c := *h
	c.Rows = maps.Clone(h.Rows)
	c.Work = h.Work.clone()
	c.Trash = slices.Clone(h.Trash)
	c.Segs = slices.Clone(h.Segs)
	c.segs = slices.Clone(h.segs)
	return &c
}

// layers are the head's segments, oldest (the base) first, with their keys.
func (h *head) layers() ([]string, []*segment) {
	if h.Base == "" {
		return h.Segs, h.segs
	}
	return append([]string{h.Base}, h.Segs...), append([]*segment{h.base}, h.segs...)
}

// stored returns the row id as the segments hold it (nil if none, or a
// tombstone), skipping the newest skip segments.
func (h *head) stored(id string, skip int) *row {
	for i := len(h.segs) - 1 - skip; i >= 0; i-- {
		if r, ok := h.segs[i].Rows[id]; ok {
			if r.Deleted {
				return nil
			}
			return r
		}
	}
	if h.base != nil {
		return h.base.Rows[id]
	}
	return nil
}

// get returns the live row id, or nil.
func (h *head) get(id string) *row {
	if r, ok := h.Rows[id]; ok {
		if r.Deleted {
			return nil
		}
		return r
	}
	return h.stored(id, 0)
}

// put stores a changed row (rows are never changed in place: readers may hold
// the old one) and keeps the work map in step.
func (h *head) put(id string, r *row) {
	h.Seq++
	r.Change = h.Seq
	h.Rows[id] = r
	if d, ok := r.due(); ok {
		h.Work.set(id, d)
	} else {
		h.Work.del(id)
	}
}

// remove purges id: a tombstone if a segment holds it.
func (h *head) remove(id string) {
	h.Work.del(id)
	if h.stored(id, 0) != nil {
		h.Seq++
		h.Rows[id] = &row{Deleted: true, Change: h.Seq}
		return
	}
	delete(h.Rows, id)
}

// each calls fn for every live row (rows shadowed by newer ones skipped).
func (h *head) each(fn func(id string, r *row)) {
	shadowed := func(id string, newer []*segment) bool {
		if _, ok := h.Rows[id]; ok {
			return true
		}
		for _, s := range newer {
			if _, ok := s.Rows[id]; ok {
				return true
			}
		}
		return false
	}
	if h.base != nil {
		for id, r := range h.base.Rows {
			if !shadowed(id, h.segs) {
				fn(id, r)
			}
		}
	}
	for i, s := range h.segs {
		for id, r := range s.Rows {
			if !r.Deleted && !shadowed(id, h.segs[i+1:]) {
				fn(id, r)
			}
		}
	}
	for id, r := range h.Rows {
		if !r.Deleted {
			fn(id, r)
		}
	}
}

// deriveWork sets h.Work from its rows over segWork, the work of its
// segments (see segmentWork), which becomes h's: the caller's own copy.
func (h *head) deriveWork(segWork workSet) {
	if segWork.byID == nil {
		segWork = newWorkSet()
	}
	h.Work = segWork
	layerWork(h.Work, h.Rows)
}

// segmentWork is the work of a head's segments, oldest first: each row's due
// time unless a newer segment changed or deleted it. Segments are immutable,
// so it is computed once per set of segments (Backend.segWork).
func segmentWork(layers []*segment) workSet {
	w := newWorkSet()
	for _, seg := range layers {
		layerWork(w, seg.Rows)
	}
	return w
}

// layerWork lays rows over the work w of older layers: a row's due time, or
// none if it is done or a tombstone.
func layerWork(w workSet, rows map[string]*row) {
	for id, r := range rows {
		if d, ok := r.due(); ok && !r.Deleted {
			w.set(id, d)
		} else {
			w.del(id)
		}
	}
}

// index is the work index document.
//
// Claim must find due work without reading every shard. work.json keeps,
// per shard, a time no later than the shard's earliest due work (pending
// and failed records by their next attempt, claimed ones by their lease's
// end). Writers keep it low: a write that leaves work in a shard reads the
// index afterwards and lowers the shard's entry if needed (Record does this
// in the background, after it returned and 50 ms more, so that the Records
// that follow share the index update: until it is done, Claim in the same
// process visits the shard anyway, and other processes see the work that
// much later). Claimers raise it, safely: a claimer marks the shards it
// expects to leave with nothing due (a nonce in the index, in the same
// write that reads which are due; none needed, no write), claims in each,
// in parallel, with a compare-and-swap of the head (which tells it the
// shard's true earliest due time), then sets each marked entry to that time
// only if its mark is still there (a shard it emptied unexpectedly is
// marked, read and set the same way afterwards). A writer that reads the
// index after its shard write removes any mark on that shard, so a claimer
// that looked before the write cannot raise the entry past the new work. A
// writer killed between its shard write and the index write (50 ms and a
// round trip) can leave an entry too high; each ledger instance therefore
// sweeps every shard on its first Claim and every Options.SweepEvery
// (default one minute) after.
type index struct {
	Due  map[string]int64  `json:"due"`            // shard → lower bound of its earliest due work
	Mark map[string]string `json:"mark,omitempty"` // shard → a claimer's mark
}

// meta is the ledger's descriptor, written once.
type meta struct {
	Format int   `json:"cairn_ledger"`
	Shards int   `json:"shards"`
	Made   int64 `json:"created"`
}

// formatVersion is the layout this cairn writes. 2: heads may name
// immutable segments besides the base (a cairn that reads only format 1
// would drop them when it rewrote a head, losing their records, so it must
// refuse the ledger). 3: heads no longer store the work map (id → due time
// of every active row): readers derive it from the rows, so a head write no
// longer grows with the shard's backlog (a cairn that reads format 2 would
// see no work in the segments, so it must refuse the ledger). An older
// ledger is upgraded when opened: its heads are valid format 3 (the stored
// work map is ignored).
const formatVersion = 3

func shardName(s int) string { return fmt.Sprintf("%03d", s) }

// shardOf is the shard of a key: every version of a key in one shard.
func shardOf(bucket, key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(bucket))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

var hashSeed = maphash.MakeSeed()

func decodeJSON(data []byte, v any, what string) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("objledger: %s does not parse (not written by this cairn?): %w", what, err)
	}
	return nil
}
