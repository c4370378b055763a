package sqlledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// An image in the intake log holds exactly a row's statement arguments, in
// order: the fold reads it by position (foldLogSQL).
func TestImageIsTheRowsArguments(t *testing.T) {
	now := fromMS(1_700_000_000_123) // as read back
	r := &ledger.Record{Bucket: "b", Key: "a \"quoted\" \\ key\x01\t\n with ünïcode, + and %2F/../",
		VersionID: "v1", ETag: "e", Size: 1 << 40, Kind: event.Created, Name: "ObjectCreated:Put", EventTime: now,
		Seq: "0000000000000001", Status: ledger.Claimed, Attempts: 3, Token: -7, LeaseUntil: fromMS(1_700_000_060_123),
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
			_, isText := got[i].(string)
			if isText != (colTypes[i] == "text") {
				t.Errorf("column %d: image has %T, colTypes says %s", i, got[i], colTypes[i])
			}
		}
		// Read back as a row is read (scanRecord, in cols order), the image
		// is the record: no two columns are swapped.
		var rev int64
		c, err := scanRecord(imageScanner(got), &rev)
		if err != nil {
			t.Fatal(err)
		}
		if c.Record != *r || c.Ident != "ident" || rev != 9 {
			t.Errorf("read back:\n%+v %q %d\nwant\n%+v", c.Record, c.Ident, rev, *r)
		}
	}
	bad := *r
	bad.Key = "\xff"
	if _, ok := (&Backend{}).appendImage(nil, "ident", &row{&bad, 1}); ok {
		t.Error("an image of invalid UTF-8 was accepted")
	}
}

// imageScanner scans an image's decoded columns as database/sql scans a row.
type imageScanner []any

func (v imageScanner) Scan(dest ...any) error {
	if len(dest) != len(v) {
		return fmt.Errorf("%d columns into %d destinations", len(v), len(dest))
	}
	for i, d := range dest {
		switch d := d.(type) {
		case *string:
			s, ok := v[i].(string)
			if !ok {
				return fmt.Errorf("column %d: %T into a string", i, v[i])
			}
			*d = s
		case *int64, *int:
			n, ok := v[i].(json.Number)
			if !ok {
				return fmt.Errorf("column %d: %T into a number", i, v[i])
			}
			x, err := n.Int64()
			if err != nil {
				return err
			}
			if p, ok := d.(*int); ok {
				*p = int(x)
			} else {
				*d.(*int64) = x
			}
		default:
			return fmt.Errorf("column %d: destination %T", i, d)
		}
	}
	return nil
}
