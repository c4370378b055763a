package dynamoledger

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/driver"
)

// The table's attributes. pk and sk are the table's key; wp/ws are the work
// index's (only on records with work to do: pending, failed, claimed), ap/as
// the age index's (only on finished records: processed, failed, dead) and
// kp/ks the keys index's (every record).
const (
	attrPK      = "pk"
	attrSK      = "sk"
	attrWorkP   = "wp"
	attrWorkS   = "ws"
	attrAgeP    = "ap"
	attrAgeS    = "as"
	attrKeysP   = "kp"
	attrKeysS   = "ks"
	attrRev     = "rev"
	attrNonces  = "writers"
	attrStatus  = "status"
	attrExpires = "expires_at"

	indexWork = "work"
	indexAge  = "age"
	indexKeys = "keys"

	// format is the layout of the table this cairn writes, kept in the
	// descriptor. 2: the age index's partitions are per status and the
	// keys index exists (format 1 had neither).
	format = 2

	// metaPK and metaSK are the ledger's descriptor item.
	metaPK = "cairn#ledger"
	metaSK = "meta"

	// keptNonces is how many of the latest writers' nonces a record keeps:
	// a write whose answer was lost is judged by whether its nonce is among
	// them when it is read back.
	keptNonces = 16
)

// row is a record as stored, with what its conditional writes need.
type row struct {
	rec    ledger.Record
	ident  string
	rev    int64
	nonces []string
	due    int64 // an index row's: when its work is due (the work index's ws)
	// sortKey is a keys index row's sort key (listKey).
	sortKey string
}

// id is where a record lives.
type id struct{ bucket, key, ident string }

func (i id) pk() string { return recordPK(i.bucket, i.key) }

// sk is the record's sort key: "r", and with Options.EveryVersion the
// version's part of the ident; a version id too long for DynamoDB's 1,024
// bytes of sort key (S3's are 32 characters; the ledger takes any) is kept
// as its SHA-256 (the ident attribute keeps it whole).
func (i id) sk() string {
	v := strings.TrimPrefix(i.ident, i.key)
	if len(v) > maxSortKey-1 {
		return "h" + digest(v)
	}
	return "r" + v
}

// DynamoDB's limits on key attributes: 2,048 bytes of partition key, 1,024
// of sort key.
const (
	maxPartitionKey = 2048
	maxSortKey      = 1024
)

// recordPK is the partition of a key's records (every version of it, with
// Options.EveryVersion): the bucket's length makes it unambiguous whatever
// the bucket and key hold. An S3 key (1,024 bytes at most) in an S3 bucket
// (63) fits; a longer pair is kept as its SHA-256.
func recordPK(bucket, key string) string {
	pk := "r#" + strconv.Itoa(len(bucket)) + "#" + bucket + "#" + key
	if len(pk) > maxPartitionKey {
		return "h#" + digest(pk)
	}
	return pk
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func (i id) key2() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(i.pk()), attrSK: str(i.sk())}
}

// shardOf is the work and age index shard of a key: every version of a key
// in the same one.
func shardOf(bucket, key string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(bucket))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(shards))
}

func workPartition(shard int) string { return "w#" + strconv.Itoa(shard) }

// agePartition is the age index partition of a shard's finished records of
// one status, so that Purge, Replay and Counts read only the statuses they
// want.
func agePartition(s ledger.Status, shard int) string {
	return "a#" + string(s) + "#" + strconv.Itoa(shard)
}
func keysPartition(shard int) string { return "k#" + strconv.Itoa(shard) }

// listSep separates the bucket from the ident in the keys index's sort key:
// below every character of a bucket name, so that the sort key orders by
// bucket first, then ident, as List does.
const listSep = "\x01"

// listKey is the keys index's sort key of a record: bucket, listSep and
// ident, cut to DynamoDB's 1,024 bytes of sort key at a character boundary.
// Cutting keeps the order (x < y gives listKey(x) <= listKey(y)) and
// prefixes (a record whose ident starts with p has a listKey that starts
// with cut(bucket+listSep+p)); records whose keys are cut alike tie, and
// List orders ties by their whole ident.
func listKey(bucket, ident string) string { return cutUTF8(bucket+listSep+ident, maxSortKey) }

// cutUTF8 is s cut to at most n bytes, at a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// due is when a record's work is claimable (its work index sort key), and
// whether it has work at all.
func due(r *ledger.Record) (int64, bool) {
	switch r.Status {
	case ledger.Pending, ledger.Failed:
		return driver.UnixMilli(r.NextAttempt), true
	case ledger.Claimed:
		return driver.UnixMilli(r.LeaseUntil), true
	}
	return 0, false
}

// finished tells records in the age index (what Purge and Replay select
// from).
func finished(s ledger.Status) bool {
	return s == ledger.Processed || s == ledger.Failed || s == ledger.Dead
}

// marshal is the item of w.
func (b *Backend) marshal(w *row) map[string]types.AttributeValue {
	r := &w.rec
	i := id{r.Bucket, r.Key, w.ident}
	m := map[string]types.AttributeValue{
		attrPK: str(i.pk()), attrSK: str(i.sk()),
		"bucket": str(r.Bucket), "key": str(r.Key), "ident": str(w.ident),
		attrStatus: str(string(r.Status)), attrRev: num(w.rev),
	}
	text := func(name, v string) {
		if v != "" {
			m[name] = str(v)
		}
	}
	n := func(name string, v int64) {
		if v != 0 {
			m[name] = num(v)
		}
	}
	text("version_id", r.VersionID)
	text("etag", r.ETag)
	n("size", r.Size)
	text("kind", string(r.Kind))
	text("name", r.Name)
	n("event_time", driver.UnixMilli(r.EventTime))
	text("seq", r.Seq)
	n("attempts", int64(r.Attempts))
	n("token", r.Token)
	n("lease_until", driver.UnixMilli(r.LeaseUntil))
	n("next_at", driver.UnixMilli(r.NextAttempt))
	n("first_seen", driver.UnixMilli(r.FirstSeen))
	n("updated", driver.UnixMilli(r.Updated))
	n("seen", int64(r.Seen))
	n("stale", int64(r.Stale))
	text("last_error", r.LastError)
	text("result", r.Result)
	text("source", r.Source)
	text("format", string(r.Format))
	text("region", r.Region)
	text("request_id", r.RequestID)
	text("host_id", r.HostID)
	n("gen", r.Gen)
	n("run_gen", r.RunGen)
	n("replays", int64(r.Replays))
	text(attrNonces, strings.Join(w.nonces, " "))
	shard := shardOf(r.Bucket, r.Key, b.shards)
	m[attrKeysP], m[attrKeysS] = str(keysPartition(shard)), str(listKey(r.Bucket, w.ident))
	if at, ok := due(r); ok {
		m[attrWorkP], m[attrWorkS] = str(workPartition(shard)), num(at)
	}
	if finished(r.Status) {
		m[attrAgeP], m[attrAgeS] = str(agePartition(r.Status, shard)), num(driver.UnixMilli(r.Updated))
		if b.retention > 0 && r.Status == ledger.Processed {
			// DynamoDB's TTL (unix seconds) deletes it some time after.
			m[attrExpires] = num(r.Updated.Add(b.retention).Unix())
		}
	}
	return m
}

// unmarshal reads an item written by marshal.
func unmarshal(m map[string]types.AttributeValue) (*row, error) {
	var bad error
	text := func(name string) string {
		if v, ok := m[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	n := func(name string) int64 {
		v, ok := m[name].(*types.AttributeValueMemberN)
		if !ok {
			return 0
		}
		x, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil && bad == nil {
			bad = fmt.Errorf("dynamodb ledger: attribute %s of %q is not an integer: %q", name, text(attrPK), v.Value)
		}
		return x
	}
	w := &row{ident: text("ident"), rev: n(attrRev)}
	if s := text(attrNonces); s != "" {
		w.nonces = strings.Fields(s)
	}
	w.rec = ledger.Record{
		Bucket: text("bucket"), Key: text("key"), VersionID: text("version_id"), ETag: text("etag"), Size: n("size"),
		Kind: event.Kind(text("kind")), Name: text("name"), EventTime: driver.FromUnixMilli(n("event_time")), Seq: text("seq"),
		Status: ledger.Status(text(attrStatus)), Attempts: int(n("attempts")), Token: n("token"),
		LeaseUntil: driver.FromUnixMilli(n("lease_until")), NextAttempt: driver.FromUnixMilli(n("next_at")),
		FirstSeen: driver.FromUnixMilli(n("first_seen")), Updated: driver.FromUnixMilli(n("updated")),
		Seen: int(n("seen")), Stale: int(n("stale")), LastError: text("last_error"), Result: text("result"), Source: text("source"),
		Format: event.Format(text("format")), Region: text("region"), RequestID: text("request_id"), HostID: text("host_id"),
		Gen: n("gen"), RunGen: n("run_gen"), Replays: int(n("replays")),
	}
	if w.rec.Bucket == "" || w.ident == "" {
		return nil, fmt.Errorf("dynamodb ledger: item %q is not a ledger record (no bucket or ident)", text(attrPK))
	}
	return w, bad
}

func (w *row) claim() ledger.Claim { return ledger.Claim{Record: w.rec, Ident: w.ident} }

// indexAttributes are what the indexes project besides their keys: the
// record's identity and status, which change only when the index keys do
// (or never), so that a write that changes neither (a duplicate, a coalesced
// or stale delivery, a renewal) writes no index item.
var indexAttributes = []string{"bucket", "key", "ident", attrStatus}

// keysAttributes are what the keys index projects: the record's identity,
// which never changes, so that the index item is written when the record is
// made and deleted when it is purged, never in between.
var keysAttributes = []string{"bucket", "key", "ident"}

// indexRow reads an index item: identity and status, the work index's due
// time, and (age index) the last update. The rest of the record is not
// there: read it (get) before changing it.
func indexRow(m map[string]types.AttributeValue) (*row, error) {
	w, err := unmarshal(m)
	if err != nil {
		return nil, err
	}
	if v, ok := m[attrWorkS].(*types.AttributeValueMemberN); ok {
		w.due, _ = strconv.ParseInt(v.Value, 10, 64)
	}
	if v, ok := m[attrAgeS].(*types.AttributeValueMemberN); ok {
		at, _ := strconv.ParseInt(v.Value, 10, 64)
		w.rec.Updated = driver.FromUnixMilli(at)
	}
	return w, nil
}
