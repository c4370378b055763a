package ledgertest

// Processes: several processes sharing one ledger, and a worker killed with
// its claim held. The children are this test binary run again: the parent
// starts it with the child's mode in the environment, and MaybeChild, first
// in the test package's TestMain, runs the child side instead of the tests.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/ledger"
)

// Child-process protocol: the parent starts the test binary with these
// variables; the child prints childHello and its mode, opens the ledger at
// envURL, runs, and prints its reports.
const (
	envChild = "CAIRN_LEDGERTEST_CHILD"
	envURL   = "CAIRN_LEDGERTEST_URL"
	envSeed  = "CAIRN_LEDGERTEST_SEED"

	childHello = "ledgertest child"
)

// MaybeChild runs the child side of a process case and exits, if this process
// was started as one; otherwise it returns at once. Call it first in the
// TestMain of every package that calls Run:
//
//	func TestMain(m *testing.M) {
//		ledgertest.MaybeChild()
//		os.Exit(m.Run())
//	}
//
// The child opens the ledger with ledger.Open, so the test binary must
// import the backend that registers the ledger's URL scheme.
func MaybeChild() {
	mode := os.Getenv(envChild)
	if mode == "" {
		return
	}
	fmt.Println(childHello, mode)
	fn := childBody(mode)
	if fn == nil {
		fmt.Println("error unknown mode", mode)
		os.Exit(2)
	}
	os.Exit(childMain(fn))
}

// childBody is what the child of mode does with the ledger, or nil for an
// unknown mode.
func childBody(mode string) func(ctx context.Context, l *ledger.Ledger, seed uint64) error {
	switch mode {
	case "storm":
		return func(ctx context.Context, l *ledger.Ledger, seed uint64) error {
			return work(ctx, l, storm(30, seed), 10, func(key, seq string, token int64) { fmt.Println("ran", key, seq, token) })
		}
	case "claim-and-hang":
		return func(ctx context.Context, l *ledger.Ledger, _ uint64) error {
			if _, err := l.Record(ctx, "child", []event.Event{ev("durable", "01")}); err != nil {
				return err
			}
			cs, err := l.Claim(ctx, 1, 2*time.Second)
			if err == nil && len(cs) == 1 {
				fmt.Println("claimed", cs[0].Token)
				time.Sleep(time.Hour) // killed here
			}
			return err
		}
	case "record-and-hang":
		return func(ctx context.Context, l *ledger.Ledger, _ uint64) error {
			// Every key once, then the first half again, newer: several
			// states of one key recorded by one process before it dies.
			for _, b := range [][]event.Event{recorderBatch(0, killedKeys, "01"), recorderBatch(0, killedKeys/2, "02")} {
				if _, err := l.Record(ctx, "child", b); err != nil {
					return err
				}
			}
			fmt.Println("recorded")
			time.Sleep(time.Hour) // killed here
			return nil
		}
	case "claim-complete-and-hang":
		return func(ctx context.Context, l *ledger.Ledger, _ uint64) error {
			if _, err := l.Record(ctx, "child", recorderBatch(0, killedKeys, "01")); err != nil {
				return err
			}
			// Half the keys claimed, in two calls; a quarter completed.
			var cs []ledger.Claim
			for range 2 {
				c, err := l.Claim(ctx, killedKeys/4, time.Hour)
				if err != nil {
					return err
				}
				cs = append(cs, c...)
			}
			done := cs[:killedKeys/4]
			errs, err := l.CompleteBatch(ctx, done, make([]string, len(done)))
			if err = errors.Join(append(errs, err)...); err != nil {
				return err
			}
			var line []string
			for i, c := range cs {
				state := "claimed"
				if i < len(done) {
					state = "processed"
				}
				line = append(line, fmt.Sprintf("%s=%s/%d", c.Key, state, c.Token))
			}
			fmt.Println(strings.Join(line, " "))
			time.Sleep(time.Hour) // killed here
			return nil
		}
	}
	return nil
}

// errBadLine is a child's line that is not a report.
var errBadLine = errors.New("not a report")

// killedKeys is how many keys the killed recorder records.
const killedKeys = 200

// recorderBatch is events for keys k000 from..to-1 with sequencer seq.
func recorderBatch(from, to int, seq string) []event.Event {
	var evs []event.Event
	for i := from; i < to; i++ {
		evs = append(evs, ev(fmt.Sprintf("k%03d", i), seq))
	}
	return evs
}

// childMain opens the ledger the parent named and runs fn on it: exit status
// 0, or 1 with the error printed.
func childMain(fn func(ctx context.Context, l *ledger.Ledger, seed uint64) error) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := ledger.Open(ctx, os.Getenv(envURL), nil)
	if err == nil {
		seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
		err = fn(ctx, l, seed)
		l.Close()
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	return 0
}

// child starts the test binary again as the child of mode on the ledger at
// url, and returns it with a scanner of its reports. The child is killed and
// waited for when the test ends, unless the test waited for it already.
func child(t *testing.T, h Harness, url, mode string, seed int) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envURL+"="+url, envSeed+"="+strconv.Itoa(seed))
	cmd.Env = append(cmd.Env, h.Env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != childHello+" "+mode {
		t.Fatalf("the test binary started as a ledgertest child printed %q, not %q: "+
			"call ledgertest.MaybeChild() first in this package's TestMain", sc.Text(), childHello+" "+mode)
	}
	return cmd, sc
}

func testStormProcesses(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, url := h.New(t, nil)
	if url == "" {
		t.Skip("this ledger cannot be opened from another process")
	}
	const procs = 4
	type kid struct {
		cmd *exec.Cmd
		out *bufio.Scanner
	}
	var kids []kid
	for p := range procs {
		cmd, out := child(t, h, url, "storm", p+1)
		kids = append(kids, kid{cmd, out})
	}
	log := runLog{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, k := range kids {
		wg.Go(func() {
			for k.out.Scan() {
				f := strings.Fields(k.out.Text())
				mu.Lock()
				var token int64
				var err error = errBadLine
				if len(f) == 4 && f[0] == "ran" {
					token, err = strconv.ParseInt(f[3], 10, 64)
				}
				if err == nil {
					log.add(f[1], f[2], token)
				} else {
					t.Errorf("child: %s", k.out.Text())
				}
				mu.Unlock()
			}
			if err := k.cmd.Wait(); err != nil {
				t.Errorf("child: %v", err)
			}
		})
	}
	wg.Wait()
	checkStorm(t, ctx, l, 30, log.inClaimOrder())
}

// A worker killed with -9 between claim and complete: nothing recorded is lost,
// and once its lease expires the work is claimable again with a higher token.
func testKilledWorker(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, url := h.New(t, nil)
	if url == "" {
		t.Skip("this ledger cannot be opened from another process")
	}
	cmd, out := child(t, h, url, "claim-and-hang", 0)
	if !out.Scan() || !strings.HasPrefix(out.Text(), "claimed ") {
		t.Fatalf("child: %q", out.Text())
	}
	token, _ := strconv.ParseInt(strings.TrimPrefix(out.Text(), "claimed "), 10, 64)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if cs := must(l.Claim(ctx, 1, time.Minute))(t); len(cs) != 0 {
		t.Fatalf("claimed while the dead worker's lease is still running: %+v", cs)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cs := must(l.Claim(ctx, 1, time.Minute))(t)
		if len(cs) == 1 {
			if cs[0].Key != "durable" || cs[0].Token != token+1 {
				t.Fatalf("takeover claim %+v, want token %d", cs[0], token+1)
			}
			if err := l.Complete(ctx, cs[0], ""); err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the killed worker's claim never became claimable again")
}

// A recorder killed with -9 right after its Records returned: every event it
// recorded is there for the ledger's other users (a handle opened before,
// which had recorded the same key itself, and one opened after), decided
// against what the dead process recorded, and nothing is claimable twice.
func testKilledRecorder(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, url := h.New(t, nil)
	if url == "" {
		t.Skip("this ledger cannot be opened from another process")
	}
	// This handle records first, so that it holds state of its own about k000.
	if got := outcomes(must(l.Record(ctx, "parent", []event.Event{ev("k000", "00")}))(t)); got[0] != ledger.Accepted {
		t.Fatalf("first record: %v", got)
	}
	cmd, out := child(t, h, url, "record-and-hang", 0)
	if !out.Scan() || out.Text() != "recorded" {
		t.Fatalf("child: %q", out.Text())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	check := func(name string, l *ledger.Ledger) {
		t.Helper()
		if c := must(l.Counts(ctx))(t); c[ledger.Pending] != killedKeys {
			t.Fatalf("%s: counts %v, want %d pending", name, c, killedKeys)
		}
		for i, want := range map[int]string{0: "02", killedKeys/2 - 1: "02", killedKeys / 2: "01", killedKeys - 1: "01"} {
			rs := must(l.Get(ctx, "b", fmt.Sprintf("k%03d", i)))(t)
			if len(rs) != 1 || rs[0].Seq != want {
				t.Fatalf("%s: k%03d is %+v, want sequencer %s", name, i, rs, want)
			}
		}
	}
	check("the handle opened before", l)
	// Deliveries the dead process recorded are known to this handle, whose own
	// earlier view of k000 is out of date.
	again := append(recorderBatch(0, killedKeys/2, "02"), recorderBatch(killedKeys/2, killedKeys, "01")...)
	for i, o := range outcomes(must(l.Record(ctx, "parent", again))(t)) {
		if o != ledger.Duplicate {
			t.Fatalf("redelivered %s/%s: %s, want duplicate", again[i].Key, again[i].Sequencer, o)
		}
	}
	if got := outcomes(must(l.Record(ctx, "parent", []event.Event{ev("k000", "01")}))(t)); got[0] != ledger.Stale {
		t.Fatalf("k000/01 after k000/02: %v, want stale", got)
	}
	l2 := h.open(t, url)
	check("a handle opened after", l2)
	claimed := map[string]bool{}
	for {
		cs := must(l2.Claim(ctx, 64, time.Minute))(t)
		if len(cs) == 0 {
			break
		}
		for _, c := range cs {
			if claimed[c.Key] {
				t.Fatalf("%s claimed twice", c.Key)
			}
			claimed[c.Key] = true
		}
	}
	if len(claimed) != killedKeys {
		t.Fatalf("claimed %d keys, want %d", len(claimed), killedKeys)
	}
}

// Two handles on one ledger (what two processes have), taking turns on one
// key: each decides against what the other recorded, claimed and completed,
// including state the other has not yet written out anywhere but its own
// log.
func testTwoHandles(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l1, url := h.New(t, nil)
	if url == "" {
		t.Skip("this ledger cannot be opened from another process")
	}
	l2 := h.open(t, url)
	rec := func(l *ledger.Ledger, seq string, want ledger.Outcome) {
		t.Helper()
		if got := outcomes(must(l.Record(ctx, "s", []event.Event{ev("a", seq), ev("other-"+seq, "1")}))(t)); got[0] != want {
			t.Fatalf("a/%s: %s, want %s", seq, got[0], want)
		}
	}
	rec(l1, "1", ledger.Accepted)
	rec(l2, "1", ledger.Duplicate)
	rec(l2, "2", ledger.Coalesced)
	rec(l1, "2", ledger.Duplicate)
	rec(l1, "1", ledger.Stale)
	var c ledger.Claim
	for _, x := range must(l2.Claim(ctx, 10, time.Minute))(t) {
		if x.Key == "a" {
			c = x
		}
	}
	if c.Seq != "2" {
		t.Fatalf("claim of a: %+v", c)
	}
	rec(l1, "3", ledger.Accepted) // newer work while claimed
	if err := l2.Complete(ctx, c, "done"); err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*ledger.Ledger{"l1": l1, "l2": l2} {
		rs := must(l.Get(ctx, "b", "a"))(t)
		if len(rs) != 1 || rs[0].Seq != "3" || rs[0].Status != ledger.Pending {
			t.Fatalf("%s: a is %+v, want sequencer 3 pending again", name, rs)
		}
	}
	rec(l2, "3", ledger.Duplicate)
	rec(l1, "2", ledger.Stale)
}

// A worker killed with -9 right after it claimed half of what it recorded and
// completed half of that (state that may still sit in its own log): for a
// handle opened before and one opened after, the completed keys are
// processed, the claimed ones stay claimed under the dead worker's lease
// (never claimable), and the rest is claimed exactly once.
func testKilledClaimer(t *testing.T, h Harness) {
	ctx := ctxT(t)
	l, url := h.New(t, nil)
	if url == "" {
		t.Skip("this ledger cannot be opened from another process")
	}
	// This handle holds state of its own about k000 and k199.
	if _, err := l.Record(ctx, "parent", []event.Event{ev("k000", "00"), ev(fmt.Sprintf("k%03d", killedKeys-1), "00")}); err != nil {
		t.Fatal(err)
	}
	cmd, out := child(t, h, url, "claim-complete-and-hang", 0)
	if !out.Scan() {
		t.Fatalf("child: %v", out.Err())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	want := map[string]string{} // key: status/token
	for _, f := range strings.Fields(out.Text()) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("child: %q", out.Text())
		}
		want[k] = v
	}
	if len(want) != killedKeys/2 {
		t.Fatalf("child claimed %d keys, want %d: %q", len(want), killedKeys/2, out.Text())
	}
	l2 := h.open(t, url)
	for _, lh := range []*ledger.Ledger{l, l2} {
		c := must(lh.Counts(ctx))(t)
		if c[ledger.Processed] != killedKeys/4 || c[ledger.Claimed] != killedKeys/4 || c[ledger.Pending] != killedKeys/2 {
			t.Fatalf("counts %v, want %d processed, %d claimed, %d pending", c, killedKeys/4, killedKeys/4, killedKeys/2)
		}
		for k, v := range want {
			rs := must(lh.Get(ctx, "b", k))(t)
			if len(rs) != 1 || fmt.Sprintf("%s/%d", rs[0].Status, rs[0].Token) != v || rs[0].Seq != "01" {
				t.Fatalf("%s is %+v, want %s with sequencer 01", k, rs, v)
			}
		}
	}
	claimed := map[string]bool{}
	for i := 0; ; i++ {
		cs := must([]*ledger.Ledger{l, l2}[i%2].Claim(ctx, 7, time.Minute))(t)
		if len(cs) == 0 {
			break
		}
		for _, c := range cs {
			if claimed[c.Key] || want[c.Key] != "" {
				t.Fatalf("%s claimed again (the child's: %q)", c.Key, want[c.Key])
			}
			if c.Attempts != 1 || c.Token < 1 || c.Seq != "01" {
				t.Fatalf("%s claimed with attempt %d, token %d, sequencer %s: want its first claim, of 01", c.Key, c.Attempts, c.Token, c.Seq)
			}
			claimed[c.Key] = true
		}
	}
	if len(claimed) != killedKeys/2 {
		t.Fatalf("claimed %d keys, want %d", len(claimed), killedKeys/2)
	}
}
