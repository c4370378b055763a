package sqlledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// An image in the intake log holds exactly a row's statement arguments, in
// order: the fold reads it by position (foldLogSQL).
func TestImageIsTheRowsArguments(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	r := &ledger.Record{Bucket: "b", Key: "a \"quoted\" \\ key\x01\t\n with ünïcode, + and %2F/../",
		VersionID: "v1", ETag: "e", Size: 1 << 40, Kind: event.Created, Name: "ObjectCreated:Put", EventTime: now,
		Seq: "0000000000000001", Status: ledger.Claimed, Attempts: 3, Token: -7, LeaseUntil: now.Add(time.Minute),
		NextAttempt: now, FirstSeen: now, Updated: now, Seen: 300, Stale: 2, LastError: strings.Repeat("é", 100),
		Result: "\u2028", Source: "webhook", Gen: 5, RunGen: 4, Replays: 1, Format: event.FormatS3, Region: "r",
		RequestID: "q", HostID: "h"}
	for _, everyVersion := range []bool{false, true} {
		l := &Backend{}
		l.opts.EveryVersion = everyVersion
		img, ok := l.appendImage(nil, "ident", &row{r, 9})
		if !ok {
			t.Fatal("a valid record was refused")
		}
		var got []any
		dec := json.NewDecoder(bytes.NewReader(img))
		dec.UseNumber()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("image %s: %v", img, err)
		}
		want := l.args("ident", r, 9)
		if len(got) != len(want) || len(want) != len(colTypes) {
			t.Fatalf("image has %d columns, args %d, colTypes %d", len(got), len(want), len(colTypes))
		}
		for i := range want {
			if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
				t.Errorf("column %d: image %q, args %q", i, got[i], want[i])
			}
		}
	}
	bad := *r
	bad.Key = "\xff"
	if _, ok := (&Backend{}).appendImage(nil, "ident", &row{&bad, 1}); ok {
		t.Error("an image of invalid UTF-8 was accepted")
	}
}
