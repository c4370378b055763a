package ledgertest

// Processes: several processes sharing one ledger, and a worker killed with
// its claim held. The children are this test binary run again (testenv.Child).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testenv"
	"github.com/cairn-s3/cairn/ledger"
)

const (
	envURL  = "CAIRN_LEDGERTEST_URL"
	envSeed = "CAIRN_LEDGERTEST_SEED"
)

// The children: registered with testenv, run by the shared TestMain
// (testmain.Run) when the test binary is re-executed as one.
func init() {
	testenv.RegisterChild("ledgertest-storm", func() int {
		return childMain(func(ctx context.Context, l *ledger.Ledger, seed uint64) error {
			return work(ctx, l, storm(30, seed), 10, func(key, seq string) { fmt.Println("ran", key, seq) })
		})
	})
	testenv.RegisterChild("ledgertest-claim-and-hang", func() int {
		return childMain(func(ctx context.Context, l *ledger.Ledger, _ uint64) error {
			if _, err := l.Record(ctx, "child", []event.Event{ev("durable", "01")}); err != nil {
				return err
			}
			cs, err := l.Claim(ctx, 1, 2*time.Second)
			if err == nil && len(cs) == 1 {
				fmt.Println("claimed", cs[0].Token)
				time.Sleep(time.Hour) // killed here
			}
			return err
		})
	})
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

func child(t *testing.T, h Harness, url, mode string, seed int) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := testenv.Child(t, "ledgertest-"+mode, append(h.Env, envURL+"="+url, envSeed+"="+strconv.Itoa(seed))...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
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
	log := map[string][]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, k := range kids {
		wg.Go(func() {
			for k.out.Scan() {
				f := strings.Fields(k.out.Text())
				mu.Lock()
				if len(f) == 3 && f[0] == "ran" {
					log[f[1]] = append(log[f[1]], f[2])
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
	checkStorm(t, ctx, l, 30, log)
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
