package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
	"github.com/cairn-s3/cairn/internal/testing/services"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
)

// flockScript is an exec handler that proves, by itself, that no two runs of
// a key overlap: it takes a non-blocking flock on a file of its key (failing
// that, it logs "overlap" and asks for a retry) and logs its start, a tick
// every 100ms ($TICKS of them) and its end, each with the time (ns) and its
// key, fencing token, sequencer and instance.
const flockScript = `#!/bin/sh
k=$(printf %s "$CAIRN_KEY" | tr -c 'A-Za-z0-9' _)
mark() { echo "$1 $CAIRN_KEY $CAIRN_FENCING_TOKEN $CAIRN_SEQUENCER $INSTANCE $(date +%s%N)" >> "$MARKS"; }
exec 9>>"$MARKS.$k.lock"
if ! flock -n 9; then mark overlap; exit 75; fi
mark start
i=0
while [ $i -lt "$TICKS" ]; do sleep 0.1; mark tick; i=$((i+1)); done
mark end
`

// runMark is one line of flockScript's log.
type runMark struct {
	kind, key, seq, instance string
	tok                      int
	at                       int64
}

func readRunMarks(t *testing.T, path string) []runMark {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ms []runMark
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 {
			continue
		}
		tok, _ := strconv.Atoi(f[2])
		at, _ := strconv.ParseInt(f[5], 10, 64)
		ms = append(ms, runMark{kind: f[0], key: f[1], tok: tok, seq: f[3], instance: f[4], at: at})
	}
	return ms
}

// checkRuns fails t if two runs of one key overlapped (a failed flock, or
// one run's marks interleaving another's), if a key's newest change (seq
// newest) did not end, or if a run of an older change left a mark after a
// run of the newest began.
func checkRuns(t *testing.T, ms []runMark, keys []string, newest string) {
	t.Helper()
	type run struct {
		first, last int64
		seq         string
		ended       bool
	}
	runs := map[string]map[string]*run{} // key → instance/token → run
	for _, m := range ms {
		if m.kind == "overlap" {
			t.Errorf("%s: token %d (%s) found the key's flock held by another run", m.key, m.tok, m.instance)
			continue
		}
		id := fmt.Sprintf("%s/%d", m.instance, m.tok)
		if runs[m.key] == nil {
			runs[m.key] = map[string]*run{}
		}
		r := runs[m.key][id]
		if r == nil {
			r = &run{first: m.at, seq: m.seq}
			runs[m.key][id] = r
		}
		r.first, r.last = min(r.first, m.at), max(r.last, m.at)
		r.ended = r.ended || m.kind == "end"
	}
	for _, k := range keys {
		var rs []*run
		for _, r := range runs[k] {
			rs = append(rs, r)
		}
		slices.SortFunc(rs, func(a, b *run) int { return int(a.first - b.first) })
		newestStart := int64(-1)
		for i, r := range rs {
			if i > 0 && rs[i-1].last >= r.first {
				t.Errorf("%s: a run (%s) was still running %v after the next (%s) started", k, rs[i-1].seq, time.Duration(rs[i-1].last-r.first), r.seq)
			}
			if r.seq == newest && newestStart < 0 {
				newestStart = r.first
			}
		}
		done := false
		for _, r := range rs {
			if r.seq != newest && newestStart >= 0 && r.last > newestStart {
				t.Errorf("%s: a run of the older change %s ran after the newest began", k, r.seq)
			}
			done = done || (r.seq == newest && r.ended)
		}
		if !done {
			t.Errorf("%s: its newest change %s never ended processed", k, newest)
		}
	}
}

// post sends S3 records for keys with sequencer seq to a serve's webhook.
func post(t *testing.T, port int, keys []string, seq string) {
	t.Helper()
	var recs []string
	for _, k := range keys {
		recs = append(recs, fmt.Sprintf(`{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put","eventTime":"2025-01-01T00:00:00Z",`+
			`"s3":{"bucket":{"name":"b"},"object":{"key":%q,"size":1,"eTag":"e%s","sequencer":%q}}}`, k, seq, seq))
	}
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/events", port), "application/json",
		strings.NewReader(`{"Records":[`+strings.Join(recs, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("webhook: %s", resp.Status)
	}
}

// metric reads one counter of a serve's /metrics.
func metric(t *testing.T, port int, name string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// holderFault is a way the first holder of the keys is cut off or stalled:
// cut starts it, heal ends it.
type holderFault struct {
	name string
	cut  func(t *testing.T, proxy *faultproxy.TCP, serve *serveProc)
	heal func(proxy *faultproxy.TCP, serve *serveProc)
}

var holderFaults = []holderFault{
	{"blackhole", func(_ *testing.T, proxy *faultproxy.TCP, _ *serveProc) { proxy.Blackhole(true) },
		func(proxy *faultproxy.TCP, _ *serveProc) { proxy.Blackhole(false) }},
	{"sigstop", func(t *testing.T, _ *faultproxy.TCP, p *serveProc) {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}, func(_ *faultproxy.TCP, p *serveProc) { _ = p.cmd.Process.Signal(syscall.SIGCONT) }},
}

// ledgerThrough is a shared ledger two serve instances use: the URL through
// a TCP proxy (for the instance the fault cuts off), the URL direct, and the
// environment both need.
type ledgerThrough func(t *testing.T) (proxy *faultproxy.TCP, viaProxy, direct string, env []string)

// proxied starts a TCP proxy to host:port and returns it.
func proxied(t *testing.T, hostport string) *faultproxy.TCP {
	t.Helper()
	p, err := faultproxy.NewTCP(hostport)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

var sharedLedgers = []struct {
	name string
	open ledgerThrough
}{
	{"postgres", func(t *testing.T) (*faultproxy.TCP, string, string, []string) {
		direct := testenv.PostgresSchema(t, testenv.PGExec)
		u, err := url.Parse(direct)
		if err != nil {
			t.Fatal(err)
		}
		p := proxied(t, u.Host)
		u.Host = p.Addr
		return p, u.String(), direct, nil
	}},
	{"objledger-minio", func(t *testing.T) (*faultproxy.TCP, string, string, []string) {
		ep := testenv.S3(t)
		_, direct := testenv.NewBucket(t, ep)
		direct = strings.Replace(direct, "?", "/ledger?", 1)
		u, err := url.Parse(ep.URL)
		if err != nil {
			t.Fatal(err)
		}
		p := proxied(t, u.Host)
		return p, strings.Replace(direct, "endpoint="+ep.URL, "endpoint=http://"+p.Addr, 1), direct, ep.Env()
	}},
}

// TestHolderStopsBeforeLeaseExpires: two cairn serve processes on one shared
// ledger (PostgreSQL; the object-store ledger on MinIO) run exec handlers
// that hold a flock on their key. The first instance claims the keys; then it
// is cut off from the ledger (a blackholed TCP connection: nothing forwarded,
// nothing closed) or stopped (SIGSTOP), and the second takes the keys over
// with newer changes. No two runs of a key overlap (no flock is found taken,
// no run's marks interleave another's), every key's newest change is
// processed, no older change runs after it, and the cut-off instance counts
// its stopped runs as lease losses.
func TestHolderStopsBeforeLeaseExpires(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux")
	}
	if _, err := os.Stat("/usr/bin/flock"); err != nil {
		t.Skip("needs flock(1)")
	}
	for _, led := range sharedLedgers {
		for _, f := range holderFaults {
			t.Run(led.name+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				testHolderStops(t, led.open, f)
			})
		}
	}
}

func testHolderStops(t *testing.T, open ledgerThrough, f holderFault) {
	proxy, viaProxy, direct, env := open(t)
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	script := filepath.Join(dir, "handler.sh")
	if err := os.WriteFile(script, []byte(flockScript), 0o755); err != nil {
		t.Fatal(err)
	}
	ports := [2]int{}
	for i := range ports {
		var err error
		if ports[i], err = services.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	args := func(ledgerURL string) []string {
		return []string{"--ledger", ledgerURL, "--handler-exec", script, "--lease", "2s", "--concurrency", "8",
			"--handler-state", filepath.Join(dir, "state"), "--grace", "1s"}
	}
	keys := []string{"k0", "k1", "k2", "k3"}
	// The first holder's runs would take 20s; the second's are short.
	a := startServe(t, ports[0], append([]string{"MARKS=" + marks, "INSTANCE=a", "TICKS=200"}, env...), args(viaProxy)...)
	post(t, ports[0], keys, "0A")
	deadline := time.Now().Add(30 * time.Second)
	for started := 0; started < len(keys); {
		started = 0
		for _, m := range readRunMarks(t, marks) {
			if m.kind == "start" && m.instance == "a" {
				started++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance a started %d of %d keys in 30s", started, len(keys))
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.cut(t, proxy, a)
	healed := false
	heal := func() {
		if !healed {
			healed = true
			f.heal(proxy, a)
		}
	}
	defer heal()
	startServe(t, ports[1], append([]string{"MARKS=" + marks, "INSTANCE=b", "TICKS=2"}, env...), args(direct)...)
	post(t, ports[1], keys, "0B")
	deadline = time.Now().Add(60 * time.Second)
	for {
		ended := map[string]bool{}
		for _, m := range readRunMarks(t, marks) {
			if m.kind == "end" && m.seq == "0B" {
				ended[m.key] = true
			}
		}
		if len(ended) == len(keys) {
			break
		}
		if time.Now().After(deadline) {
			checkRuns(t, readRunMarks(t, marks), keys, "0B")
			data, _ := os.ReadFile(marks)
			t.Fatalf("the newest changes were not all processed in 60s:\n%s", tailString(string(data), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	heal()
	// Whatever of instance a is still running leaves marks now: give it
	// the time of a few ticks (a run killed leaves none, one running on
	// leaves a tick every 100ms; without the rule they ran for 20s).
	time.Sleep(500 * time.Millisecond)
	checkRuns(t, readRunMarks(t, marks), keys, "0B")
	// Instance a counted its stopped runs as lost leases, never processed.
	deadline = time.Now().Add(20 * time.Second)
	for metric(t, ports[0], "cairn_intake_lease_losses_total") < float64(len(keys)) {
		if time.Now().After(deadline) {
			t.Errorf("instance a counted %v lease losses, want %d", metric(t, ports[0], "cairn_intake_lease_losses_total"), len(keys))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := metric(t, ports[0], `cairn_intake_handler_outcomes_total{outcome="processed"}`); n != 0 {
		t.Errorf("instance a counted %v stopped runs as processed", n)
	}
	if t.Failed() {
		data, _ := os.ReadFile(marks)
		t.Logf("marks:\n%s", tailString(string(data), 6000))
	}
}

// TestLockRunHolderStopped: a `cairn lock run` holder is stopped (SIGSTOP)
// while its command holds a flock; a second `cairn lock run` takes the lease
// over once it expired. The first command was killed by then (its deadline
// keeper), so the second finds the flock free and no marks interleave; the
// first holder, continued, exits 4 (lease lost). On the directory store and
// on MinIO, for lock run and lock tree.
func TestLockRunHolderStopped(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux")
	}
	if _, err := os.Stat("/usr/bin/flock"); err != nil {
		t.Skip("needs flock(1)")
	}
	for _, store := range []string{"fs", "minio"} {
		for _, kind := range []string{"run", "tree"} {
			t.Run(store+"/"+kind, func(t *testing.T) {
				t.Parallel()
				var storeURL string
				var env []string
				if store == "fs" {
					storeURL = "file://" + t.TempDir()
				} else {
					ep := testenv.S3(t)
					_, storeURL = testenv.NewBucket(t, ep)
					env = ep.Env()
				}
				args := func(wait string) []string {
					if kind == "tree" {
						return []string{"lock", "tree", "--store", storeURL, "--write", "/jobs/compact", "--ttl", "2s", "--wait", wait}
					}
					u := strings.Replace(storeURL, "?", "/locks/compact?", 1)
					if !strings.Contains(u, "?") {
						u += "/locks/compact"
					}
					return []string{"lock", "run", u, "--ttl", "2s", "--wait", wait}
				}
				testLockHolderStopped(t, args, env)
			})
		}
	}
}

func testLockHolderStopped(t *testing.T, args func(wait string) []string, env []string) {
	bin := buildCairn(t)
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte(flockScript), 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(instance, seq, ticks string) (*exec.Cmd, chan error) {
		c := exec.Command(bin, append(args("30s"), "--", script)...)
		c.Env = append(os.Environ(), append(env, "MARKS="+marks, "INSTANCE="+instance, "TICKS="+ticks,
			"CAIRN_KEY=job", "CAIRN_SEQUENCER="+seq)...)
		var out strings.Builder
		c.Stderr = &out
		testenv.KillGroupAtCleanup(t, c)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			err := c.Wait()
			if t.Failed() || exitOf(err) != 0 {
				t.Logf("%s: exit %d:\n%s", instance, exitOf(err), tailString(out.String(), 3000))
			}
			done <- err
		}()
		return c, done
	}
	a, aDone := start("a", "0A", "200")
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(readRunMarks(t, marks), func(m runMark) bool { return m.kind == "start" }) {
		if time.Now().After(deadline) {
			t.Fatal("the first holder's command did not start in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	defer func() {
		if !continued {
			_ = a.Process.Signal(syscall.SIGCONT)
		}
	}()
	_, bDone := start("b", "0B", "2")
	select {
	case err := <-bDone:
		if exitOf(err) != 0 {
			t.Errorf("the second holder: exit %d, want 0", exitOf(err))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the second holder did not finish in 60s")
	}
	continued = true
	_ = a.Process.Signal(syscall.SIGCONT)
	select {
	case err := <-aDone:
		if exitOf(err) != 4 {
			t.Errorf("the stopped holder, continued: exit %d, want 4 (lease lost)", exitOf(err))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped holder, continued, did not exit in 30s")
	}
	time.Sleep(300 * time.Millisecond) // a first command running on would tick meanwhile
	checkRuns(t, readRunMarks(t, marks), []string{"job"}, "0B")
	if t.Failed() {
		data, _ := os.ReadFile(marks)
		t.Logf("marks:\n%s", tailString(string(data), 4000))
	}
}

// TestRenewAbandonsBlackholedConnection: a renewal through a connection that
// went silent (blackholed: nothing forwarded, nothing closed) returns by its
// own deadline, on PostgreSQL (pgx through database/sql) and on the
// object-store ledger (the S3 client): a holder is never held up by a hung
// connection, so the next renewal goes out on time.
//
// Not parallel: it sets the S3 credentials in its own environment.
func TestRenewAbandonsBlackholedConnection(t *testing.T) {
	for _, led := range sharedLedgers {
		t.Run(led.name, func(t *testing.T) {
			proxy, viaProxy, _, env := led.open(t)
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			ctx := context.Background()
			l, err := ledger.Open(ctx, viaProxy, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ev := event.Event{Bucket: "b", Key: "k", Sequencer: "0A", Kind: event.Created, Name: "ObjectCreated:Put", ETag: "e", Format: event.FormatS3}
			_, cs, err := l.RecordAndClaim(ctx, "test", []event.Event{ev}, 1, time.Minute)
			if err != nil || len(cs) != 1 {
				t.Fatalf("claim: %v, %d claims", err, len(cs))
			}
			proxy.Blackhole(true)
			healed := false
			defer func() {
				if !healed {
					proxy.Blackhole(false)
				}
			}()
			done := make(chan error, 1)
			go func() {
				rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				_, err := l.Renew(rctx, cs[0], time.Minute)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("a renewal through a blackholed connection succeeded")
				}
			case <-time.After(30 * time.Second):
				buf := make([]byte, 1<<20)
				t.Fatalf("a renewal through a blackholed connection was still waiting 30s after its 300ms deadline:\n%s", buf[:runtime.Stack(buf, true)])
			}
			// Once the network is back the claim renews again (after the
			// abandoned request, which the ledger may still have been
			// finishing in the background).
			healed = true
			proxy.Blackhole(false)
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := l.Renew(rctx, cs[0], time.Minute); err != nil {
				t.Fatalf("renewing after the blackhole: %v", err)
			}
		})
	}
}
