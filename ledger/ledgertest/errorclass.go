package ledgertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// testErrorClasses: GroupErrors and List by Filter.ErrorClass see each
// record's class as of its last write (a failure sets it, a replay and a
// completion clear it, a new failure changes it), by whichever path the
// backend takes (its own query, or Ledger's reading through List).
func testErrorClasses(t *testing.T, h Harness) {
	ctx := ctxT(t)
	clk := newClock()
	l, _ := h.New(t, &ledger.Options{Now: clk.Now, MaxAttempts: 1})
	var evs []event.Event
	for i := range 9 {
		evs = append(evs, ev(fmt.Sprintf("k%d", i), "01"))
	}
	must(l.Record(ctx, "s", evs))(t)
	// k0..k5: "exit status N" (one class), k6, k7: a quoted name (another),
	// k8: no error at all.
	for _, c := range must(l.Claim(ctx, 10, time.Minute))(t) {
		var cause string
		switch i := int(c.Key[1] - '0'); {
		case i < 6:
			cause = fmt.Sprintf("exit status %d", i)
		case i < 8:
			cause = fmt.Sprintf("open %q: denied", c.Key)
		}
		clk.Add(time.Second)
		if err := l.Fail(ctx, c, cause, false); err != nil {
			t.Fatal(err)
		}
	}
	exit, open := ledger.ErrorClass("exit status 1"), ledger.ErrorClass(`open "x": denied`)
	type want struct {
		class    string
		count    int
		examples []string
	}
	check := func(what string, f ledger.Filter, total, classes int, ws ...want) {
		t.Helper()
		g := must(l.GroupErrors(ctx, f, 2, 2))(t)
		if g.Total != total || g.Classes != classes || g.Other != 0 || len(g.Groups) != len(ws) {
			t.Fatalf("%s: %d records, %d classes, %d other, groups %+v; want %d, %d, 0, %d groups", what, g.Total, g.Classes, g.Other, g.Groups, total, classes, len(ws))
		}
		for i, w := range ws {
			e := g.Groups[i]
			var keys []string
			for _, k := range e.Examples {
				if k.Bucket != "b" {
					t.Fatalf("%s: example %+v", what, k)
				}
				keys = append(keys, k.Key)
			}
			if e.Class != w.class || e.Count != w.count || fmt.Sprint(keys) != fmt.Sprint(w.examples) || e.First.IsZero() || e.Last.Before(e.First) {
				t.Fatalf("%s: group %d is %+v, want class %q, %d records, examples %v", what, i, e, w.class, w.count, w.examples)
			}
		}
	}
	check("dead letters", ledger.Filter{Status: ledger.Dead}, 9, 3, want{exit, 6, []string{"k0", "k1"}}, want{open, 2, []string{"k6", "k7"}})
	check("a prefix", ledger.Filter{Status: ledger.Dead, Bucket: "b", Prefix: "k7"}, 1, 1, want{open, 1, []string{"k7"}})
	check("one class", ledger.Filter{Status: ledger.Dead, ErrorClass: ledger.NoError}, 1, 1, want{ledger.NoError, 1, []string{"k8"}})
	check("no class", ledger.Filter{Status: ledger.Dead, ErrorClass: "no such class"}, 0, 0)

	list := func(f ledger.Filter) []string {
		t.Helper()
		var keys []string
		f.Limit = 2
		for {
			cs := must(l.List(ctx, f))(t)
			for _, c := range cs {
				if ledger.ErrorClass(c.LastError) != f.ErrorClass {
					t.Fatalf("List of class %q gave %s, of class %q", f.ErrorClass, c.Key, ledger.ErrorClass(c.LastError))
				}
				keys = append(keys, c.Key)
			}
			if len(cs) < f.Limit {
				return keys
			}
			f.AfterBucket, f.AfterIdent = cs[len(cs)-1].Bucket, cs[len(cs)-1].Ident
		}
	}
	if got := list(ledger.Filter{Status: ledger.Dead, ErrorClass: exit}); fmt.Sprint(got) != "[k0 k1 k2 k3 k4 k5]" {
		t.Fatalf("List by class, two at a time: %v", got)
	}
	if got := list(ledger.Filter{Status: ledger.Dead, ErrorClass: open, Prefix: "k7"}); fmt.Sprint(got) != "[k7]" {
		t.Fatalf("List by class and prefix: %v", got)
	}

	// A replay selects by class where the backend can (and is refused
	// where it cannot).
	if l.GroupsErrorsInQuery() {
		if n := must(l.Replay(ctx, ledger.Selection{ErrorClass: open, DryRun: true}))(t); n != 2 {
			t.Fatalf("a dry run of a replay by class counts %d, want 2", n)
		}
	} else if n, err := l.Replay(ctx, ledger.Selection{ErrorClass: open}); err == nil {
		t.Fatalf("a ledger that cannot select by class replayed %d by class", n)
	}
	// A replay clears the class; the replayed work then fails of another
	// cause, or completes.
	if n := must(l.Replay(ctx, ledger.Selection{Bucket: "b", Prefix: "k"}))(t); n != 9 {
		t.Fatalf("replayed %d", n)
	}
	check("after the replay", ledger.Filter{Status: ledger.Dead}, 0, 0)
	check("replayed, pending", ledger.Filter{Status: ledger.Pending}, 9, 1, want{ledger.NoError, 9, []string{"k0", "k1"}})
	for _, c := range must(l.Claim(ctx, 10, time.Minute))(t) {
		var err error
		if c.Key < "k3" {
			err = l.Fail(ctx, c, "disk full on /dev/sda1", false)
		} else {
			err = l.Complete(ctx, c, "ok")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	check("failed again", ledger.Filter{Status: ledger.Dead}, 3, 1, want{ledger.ErrorClass("disk full on /dev/sda1"), 3, []string{"k0", "k1"}})
	check("completed", ledger.Filter{Status: ledger.Processed}, 6, 1, want{ledger.NoError, 6, []string{"k3", "k4"}})
	if got := list(ledger.Filter{Status: ledger.Dead, ErrorClass: exit}); len(got) != 0 {
		t.Fatalf("List by a class no record has any more: %v", got)
	}
}
