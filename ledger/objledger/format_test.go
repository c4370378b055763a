package objledger

import (
	"encoding/json"
	"testing"
)

// The stored names of a row's fields are the ledger's format: ledgers written
// by earlier versions must still read, so the Go field names may change but
// these may not.
func TestRowFormat(t *testing.T) {
	t.Parallel()
	r := row{Bucket: "b", Ident: "i", Key: "k", VersionID: "v", ETag: "e", Size: 1, Kind: "kd", Name: "n", EventTime: 2, Seq: "q",
		Status: "st", Attempts: 3, Token: 4, LeaseUntil: 5, NextAttempt: 6, FirstSeen: 7, Updated: 8, Seen: 9, Stale: 10,
		LastError: "er", Result: "r", Source: "so", Gen: 11, RunGen: 12, Replays: 13, Format: "fm", Region: "rn",
		RequestID: "rq", HostID: "hi", Change: 14, Deleted: true}
	got, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"b":"b","i":"i","k":"k","v":"v","e":"e","z":1,"kd":"kd","n":"n","t":2,"q":"q","st":"st","at":3,"tk":4,"l":5,` +
		`"nx":6,"f":7,"u":8,"sn":9,"sl":10,"er":"er","r":"r","so":"so","g":11,"rg":12,"rp":13,"fm":"fm","rn":"rn","rq":"rq",` +
		`"hi":"hi","ch":14,"del":true}`
	if string(got) != want {
		t.Fatalf("stored row\n got %s\nwant %s", got, want)
	}
	var back row
	if err := json.Unmarshal([]byte(want), &back); err != nil || back != r {
		t.Fatalf("read back %+v %v, want %+v", back, err, r)
	}
}
