package objledger

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// row is a record as stored: times in unix milliseconds, short names (a head
// holds up to CompactAt of them and is rewritten on every write).
type row struct {
	B      string `json:"b"`
	I      string `json:"i,omitempty"` // the ident, when it is not the key
	K      string `json:"k"`
	V      string `json:"v,omitempty"`
	E      string `json:"e,omitempty"`
	Z      int64  `json:"z,omitempty"`
	Kind   string `json:"kd,omitempty"`
	N      string `json:"n,omitempty"`
	T      int64  `json:"t,omitempty"`
	Q      string `json:"q,omitempty"`
	St     string `json:"st"`
	At     int    `json:"at,omitempty"`
	Tk     int64  `json:"tk,omitempty"`
	L      int64  `json:"l,omitempty"`
	Nx     int64  `json:"nx,omitempty"`
	F      int64  `json:"f,omitempty"`
	U      int64  `json:"u,omitempty"`
	Seen   int    `json:"sn,omitempty"`
	Stale  int    `json:"sl,omitempty"`
	Err    string `json:"er,omitempty"`
	Res    string `json:"r,omitempty"`
	Src    string `json:"so,omitempty"`
	Gen    int64  `json:"g,omitempty"`
	RunGen int64  `json:"rg,omitempty"`
	Rep    int    `json:"rp,omitempty"`
	// The accepted event's format, region, request and host IDs (absent in
	// rows written before).
	Fmt string `json:"fm,omitempty"`
	Reg string `json:"rn,omitempty"`
	Req string `json:"rq,omitempty"`
	Hst string `json:"hi,omitempty"`
	// Ch is the head change counter when the row last changed (compaction
	// removes from the head only rows unchanged since it read them).
	Ch int64 `json:"ch,omitempty"`
	// Del is a tombstone: the record was purged (it may still be in the base).
	Del bool `json:"del,omitempty"`
}

func (r *row) ident() string {
	if r.I != "" {
		return r.I
	}
	return r.K
}

func id(bucket, ident string) string { return bucket + "/" + ident }

func ms(t time.Time) int64     { return ledger.UnixMilli(t) }
func fromMS(v int64) time.Time { return ledger.FromUnixMilli(v) }

func toRow(ident string, r *ledger.Record) *row {
	w := &row{B: r.Bucket, K: r.Key, V: r.VersionID, E: r.ETag, Z: r.Size, Kind: string(r.Kind), N: r.Name, T: ms(r.EventTime),
		Q: r.Seq, St: string(r.Status), At: r.Attempts, Tk: r.Token, L: ms(r.LeaseUntil), Nx: ms(r.NextAttempt), F: ms(r.FirstSeen),
		U: ms(r.Updated), Seen: r.Seen, Stale: r.Stale, Err: r.LastError, Res: r.Result, Src: r.Source, Gen: r.Gen, RunGen: r.RunGen, Rep: r.Replays,
		Fmt: string(r.Format), Reg: r.Region, Req: r.RequestID, Hst: r.HostID}
	if ident != r.Key {
		w.I = ident
	}
	return w
}

func (r *row) record() ledger.Record {
	return ledger.Record{Bucket: r.B, Key: r.K, VersionID: r.V, ETag: r.E, Size: r.Z, Kind: event.Kind(r.Kind), Name: r.N,
		EventTime: fromMS(r.T), Seq: r.Q, Status: ledger.Status(r.St), Attempts: r.At, Token: r.Tk, LeaseUntil: fromMS(r.L),
		NextAttempt: fromMS(r.Nx), FirstSeen: fromMS(r.F), Updated: fromMS(r.U), Seen: r.Seen, Stale: r.Stale, LastError: r.Err,
		Result: r.Res, Source: r.Src, Gen: r.Gen, RunGen: r.RunGen, Replays: r.Rep,
		Format: event.Format(r.Fmt), Region: r.Reg, RequestID: r.Req, HostID: r.Hst}
}

func (r *row) claim() ledger.Claim { return ledger.Claim{Record: r.record(), Ident: r.ident()} }

// due is when the row's work can next be claimed, and whether it has any.
func (r *row) due() (int64, bool) {
	switch ledger.Status(r.St) {
	case ledger.Pending, ledger.Failed:
		return r.Nx, true
	case ledger.Claimed:
		return r.L, true
	}
	return 0, false
}

// less orders rows as the SQL backends list them: by bucket, then ident.
func less(a, b *row) int {
	return cmp.Or(strings.Compare(a.B, b.B), strings.Compare(a.ident(), b.ident()))
}

// head is a shard's mutable document.
type head struct {
	Base  string           `json:"base,omitempty"` // key of the base segment ("" = none yet)
	Seq   int64            `json:"seq"`            // change counter
	Rows  map[string]*row  `json:"rows"`           // id → row changed since the base (or tombstone)
	Work  map[string]int64 `json:"work"`           // id → due (ms) of every pending, failed or claimed row
	Trash []trash          `json:"trash,omitempty"`

	base *segment // the decoded base (not stored)
}

// trash is a replaced base, deleted once its grace period is over.
type trash struct {
	Key   string `json:"key"`
	Since int64  `json:"since"`
}

// segment is an immutable base.
type segment struct {
	Rows map[string]*row `json:"rows"`
}

func (h *head) clone() *head {
	c := *h
	c.Rows = maps.Clone(h.Rows)
	c.Work = maps.Clone(h.Work)
	c.Trash = slices.Clone(h.Trash)
	return &c
}

// get returns the live row id, or nil.
func (h *head) get(id string) *row {
	if r, ok := h.Rows[id]; ok {
		if r.Del {
			return nil
		}
		return r
	}
	if h.base != nil {
		return h.base.Rows[id]
	}
	return nil
}

// put stores a changed row (rows are never changed in place: readers may hold
// the old one) and keeps the work map in step.
func (h *head) put(id string, r *row) {
	h.Seq++
	r.Ch = h.Seq
	h.Rows[id] = r
	if d, ok := r.due(); ok {
		h.Work[id] = d
	} else {
		delete(h.Work, id)
	}
}

// remove purges id: a tombstone if the base holds it.
func (h *head) remove(id string) {
	delete(h.Work, id)
	if h.base != nil && h.base.Rows[id] != nil {
		h.Seq++
		h.Rows[id] = &row{Del: true, Ch: h.Seq}
		return
	}
	delete(h.Rows, id)
}

// each calls fn for every live row (base rows shadowed by the head skipped).
func (h *head) each(fn func(id string, r *row)) {
	if h.base != nil {
		for id, r := range h.base.Rows {
			if _, ok := h.Rows[id]; !ok {
				fn(id, r)
			}
		}
	}
	for id, r := range h.Rows {
		if !r.Del {
			fn(id, r)
		}
	}
}

// minDue is the shard's earliest due work (ok false if none).
func (h *head) minDue() (int64, bool) {
	m, ok := int64(math.MaxInt64), false
	for _, d := range h.Work {
		m, ok = min(m, d), true
	}
	return m, ok
}

// index is the work index document.
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

const formatVersion = 1

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
