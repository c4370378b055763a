package lease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/objstore"
	_ "github.com/cairn-s3/cairn/objstore/fsstore"
	"github.com/cairn-s3/cairn/objstore/mem"
	_ "github.com/cairn-s3/cairn/objstore/s3store"
)

func TestMain(m *testing.M) { testmain.Run(m) }

const ttl = 300 * time.Millisecond

func TestTryAcquireReleaseTokens(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := mem.Open()
		a, b := lease.New(s, &lease.Options{TTL: ttl}), lease.New(s, &lease.Options{TTL: ttl})
		la, err := a.TryAcquire(ctx, "locks/x")
		if err != nil || la.Token() != 1 {
			t.Fatalf("first acquire: %v token %v", err, la)
		}
		if _, err := b.TryAcquire(ctx, "locks/x"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("second holder: %v, want ErrNotAcquired", err)
		}
		time.Sleep(10 * ttl) // renewals keep it alive
		if !la.Valid() {
			t.Fatal("a renewed lease went invalid")
		}
		if st, _, _ := a.Status(ctx, "locks/x"); st.Renewals < 29 {
			t.Fatalf("%d renewals in 10 TTLs, want one every TTL/3", st.Renewals)
		}
		if _, err := b.TryAcquire(ctx, "locks/x"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("after renewals: %v", err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb, err := b.TryAcquire(ctx, "locks/x")
		if err != nil || lb.Token() != 2 {
			t.Fatalf("acquire after release: %v", err)
		}
		st, _, _ := b.Status(ctx, "locks/x")
		if st.Token != 2 || st.Holder == "" {
			t.Fatalf("status %+v", st)
		}
		lb.Release(ctx)
	})
}

// A live holder keeps waiters out; Acquire with a deadline gives up.
func TestWaiterDoesNotStealALiveLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := mem.Open()
		la, err := lease.New(s, &lease.Options{TTL: ttl}).Acquire(context.Background(), "l")
		if err != nil {
			t.Fatal(err)
		}
		defer la.Release(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 4*ttl)
		defer cancel()
		if _, err := lease.New(s, &lease.Options{TTL: ttl}).Acquire(ctx, "l"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("waiter against a renewing holder: %v", err)
		}
	})
}

// A holder that stops renewing (crashed) is taken over after one TTL of
// silence, with a higher token.
func TestTakeoverAfterSilence(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := mem.Open()
		la, err := lease.New(s, &lease.Options{TTL: ttl}).Acquire(ctx, "l")
		if err != nil {
			t.Fatal(err)
		}
		la.Crash()
		start := time.Now()
		lb, err := lease.New(s, &lease.Options{TTL: ttl}).Acquire(ctx, "l")
		if err != nil {
			t.Fatal(err)
		}
		// Time in the bubble passes only while everyone waits: exactly.
		if waited := time.Since(start); waited < ttl || waited > ttl+ttl/10 {
			t.Fatalf("took over after %v, want a whole TTL (%v) of silence and at most one poll more", waited, ttl)
		}
		if lb.Token() != la.Token()+1 {
			t.Fatalf("takeover token %d, want %d", lb.Token(), la.Token()+1)
		}
		lb.Release(ctx)
	})
}

// A holder whose lease was taken over while it was paused loses it: Done
// closes and Err says so.
func TestPausedHolderLosesLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := mem.Open()
		m := lease.New(s, &lease.Options{TTL: ttl})
		la, err := m.Acquire(ctx, "l")
		if err != nil {
			t.Fatal(err)
		}
		// Another holder overwrites the lease (as after a pause past the TTL).
		if _, _, err := docstore.Typed[lease.State](docstore.New(s, nil)).Update(ctx, "l", func(st *lease.State, _ docstore.Meta) error {
			st.Holder, st.Token = "someone-else", st.Token+1
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-la.Done():
		case <-time.After(3 * ttl):
			t.Fatal("the holder did not notice it lost the lease")
		}
		if !errors.Is(la.Err(), lease.ErrLeaseLost) || la.Valid() {
			t.Fatalf("after loss: err %v valid %v", la.Err(), la.Valid())
		}
		if err := la.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("release of a lost lease: %v", err)
		}
	})
}

// --- real processes ---------------------------------------------------------

const (
	envURL  = "CAIRN_LEASE_URL"
	envSkew = "CAIRN_LEASE_SKEW"
)

// guard is the fenced resource: it accepts a write only with a token at least
// the highest it has seen.
type guard struct {
	MaxToken int64   `json:"max_token"`
	Writes   []int64 `json:"writes"`
}

var errFenced = errors.New("fenced")

func guardedWrite(ctx context.Context, d docstore.Doc[guard], token int64) error {
	_, _, err := d.Update(ctx, "resource", func(g *guard, _ docstore.Meta) error {
		if token < g.MaxToken {
			return errFenced
		}
		g.MaxToken = token
		g.Writes = append(g.Writes, token)
		return nil
	})
	return err
}

func init() { testenv.RegisterChild("lease-holder", holder) }

// holder is the child process: it takes the lease and writes through the
// guard until it is fenced (exit 0) or fails (exit 1).
func holder() int {
	ctx := context.Background()
	s, err := objstore.Open(ctx, os.Getenv(envURL), nil)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	opts := &lease.Options{TTL: 2 * time.Second}
	if skew, _ := time.ParseDuration(os.Getenv(envSkew)); skew != 0 {
		opts.Clock = skewed{clockwork.NewRealClock(), skew} // a wall clock far off
	}
	l, err := lease.New(s, opts).Acquire(ctx, "locks/job")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("token", l.Token())
	d := docstore.Typed[guard](docstore.New(s, nil))
	for {
		err := guardedWrite(ctx, d, l.Token())
		switch {
		case errors.Is(err, errFenced):
			fmt.Println("fenced")
			return 0
		case err != nil:
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("wrote")
		time.Sleep(50 * time.Millisecond)
	}
}

// skewed is the real clock, shifted by skew.
type skewed struct {
	clockwork.Clock
	skew time.Duration
}

func (c skewed) Now() time.Time { return c.Clock.Now().Add(c.skew) }

type proc struct {
	cmd *exec.Cmd
	out *bufio.Scanner
}

func start(t *testing.T, url string, env ...string) proc {
	t.Helper()
	cmd := testenv.Child(t, "lease-holder", append([]string{envURL + "=" + url}, env...)...)
	cmd.Stderr = os.Stderr
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return proc{cmd, bufio.NewScanner(out)}
}

func (p proc) expect(t *testing.T, prefix string) string {
	t.Helper()
	for p.out.Scan() {
		line := p.out.Text()
		if strings.HasPrefix(line, "error") {
			t.Fatalf("child: %s", line)
		}
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(line, prefix))
		}
	}
	t.Fatalf("child ended without %q", prefix)
	return ""
}

func runProcessScenarios(t *testing.T, url func(prefix string) string, env []string) {
	t.Run("KillTakeover", func(t *testing.T) {
		u := url("kill")
		a := start(t, u, env...)
		tokA, _ := strconv.Atoi(a.expect(t, "token"))
		a.expect(t, "wrote")
		b := start(t, u, env...) // waits: a is alive
		time.Sleep(500 * time.Millisecond)
		_ = a.cmd.Process.Signal(syscall.SIGKILL)
		tokB, _ := strconv.Atoi(b.expect(t, "token"))
		if tokB != tokA+1 {
			t.Fatalf("takeover token %d after %d", tokB, tokA)
		}
		b.expect(t, "wrote")
	})
	t.Run("PausedHolderIsFenced", func(t *testing.T) {
		u := url("pause")
		a := start(t, u, env...)
		a.expect(t, "token")
		a.expect(t, "wrote")
		_ = a.cmd.Process.Signal(syscall.SIGSTOP)
		b := start(t, u, append(env, "CAIRN_LEASE_SKEW=-1h")...) // the successor's clock is an hour behind
		b.expect(t, "token")
		b.expect(t, "wrote")
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		a.expect(t, "fenced") // its next write carries the old token: refused
	})
}

func TestProcessesFS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runProcessScenarios(t, func(p string) string { return "file://" + dir + "/" + p }, []string{"CAIRN_LEASE_SKEW=1h"})
}

// kill -9 takeover and fencing of a paused holder with real processes on
// every S3 server the suite runs (each enforces conditional PUTs, all a lease
// needs).
func TestProcessesS3Servers(t *testing.T) {
	for _, server := range testenv.S3ServerNames() {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			ep := testenv.S3Server(t, server)
			_, url := testenv.NewBucket(t, ep)
			u, _ := objstore.ParseURL(url)
			runProcessScenarios(t, func(p string) string { return fmt.Sprintf("s3://%s/%s?%s", u.Host, p, u.RawQuery) },
				append(ep.Env(), "CAIRN_LEASE_SKEW=1h"))
		})
	}
}
