package cli_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairn-s3/cairn/internal/testing/services"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
)

// effectScript is an exec handler that materialises each object change into
// one file per key, committing conditionally on the fencing token (under
// flock, it never replaces an effect written with a higher token), so effects
// are exactly-once even when a killed daemon's orphaned handler finishes late.
// Every run is logged to runs.log. $SLOW seconds of sleep make runs overlap a
// kill.
const effectScript = `#!/bin/sh
set -eu
f="$EFFECTS/$(printf %s "$CAIRN_KEY" | sha256sum | cut -c1-32)"
payload=$(cat)
case "$payload" in *'"fencing_token":'"$CAIRN_FENCING_TOKEN"*) ;; *) echo "stdin lacks the token" >&2; exit 1 ;; esac
sleep "${SLOW:-0}"
flock "$f.lock" sh -c '
  f="$1"
  if [ -f "$f" ] && [ "$(head -n1 "$f")" -gt "$CAIRN_FENCING_TOKEN" ]; then exit 0; fi
  printf "%s\n%s\n%s\n%s\n" "$CAIRN_FENCING_TOKEN" "$CAIRN_EVENT" "$CAIRN_ETAG" "$CAIRN_KEY" > "$f.tmp"
  mv "$f.tmp" "$f"
' sh "$f"
printf '%s|%s|%s\n' "$CAIRN_KEY" "$CAIRN_SEQUENCER" "$CAIRN_FENCING_TOKEN" >> "$EFFECTS/runs.log"
`

// e2eKeys are the awkward keys real buckets have.
var e2eKeys = []string{"plain.txt", "dir/with space/ünï cødé 日本 ✓.txt", "a+b=c&d?.csv", "100%/x%2Fy.bin", "deep/a/b/c/d/e.json",
	"trailing space .txt", "émoji 🎉/file", "plus+plus+.dat"}

type serveProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// kill kills the daemon outright (SIGKILL) and waits for it to exit.
func (p *serveProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// startServe runs the real cairn binary's serve and waits until it is ready.
func startServe(t *testing.T, port int, env []string, args ...string) *serveProc {
	t.Helper()
	bin := buildCairn(t)
	args = append([]string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--log-level", "info"}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.OpenFile(filepath.Join(t.TempDir(), "serve.log"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = diesWithTest()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		// Graceful stop: running handlers finish (or are killed) before the
		// test's directories go.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.kill()
		}
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("serve log:\n%s", tailString(string(out), 6000))
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			out, _ := os.ReadFile(logf.Name())
			t.Fatalf("cairn serve exited at start-up: %v\n%s", cmd.ProcessState, out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("cairn serve not ready in 30s")
		}
	}
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// notify subscribes the bucket's created and removed events to a MinIO target.
func notify(t *testing.T, c *s3.Client, bucket, arn string) {
	t.Helper()
	_, err := c.PutBucketNotificationConfiguration(context.Background(), &s3.PutBucketNotificationConfigurationInput{
		Bucket: aws.String(bucket),
		NotificationConfiguration: &s3types.NotificationConfiguration{QueueConfigurations: []s3types.QueueConfiguration{{
			QueueArn: aws.String(arn), Events: []s3types.Event{"s3:ObjectCreated:*", "s3:ObjectRemoved:*"},
		}}},
	})
	if err != nil {
		t.Fatalf("bucket notification to %s: %v", arn, err)
	}
}

// writeWorkload puts, overwrites and deletes the e2e keys.
func writeWorkload(t *testing.T, s *objstore.Store, rounds int) {
	t.Helper()
	ctx := context.Background()
	for r := range rounds {
		for i, k := range e2eKeys {
			if r > 0 && (i+r)%4 == 0 {
				if err := s.Delete(ctx, k, objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
					t.Fatal(err)
				}
				continue
			}
			if _, err := s.PutBytes(ctx, k, fmt.Appendf(nil, "%s round %d", k, r), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// effectsMatch compares the handler's effects with the bucket: every object
// present with its ETag as a "created" effect, every absent one "removed" or
// never seen.
func effectsMatch(s *objstore.Store, dir string) (bool, string) {
	ctx := context.Background()
	for _, k := range e2eKeys {
		sum := sha256.Sum256([]byte(k))
		data, err := os.ReadFile(filepath.Join(dir, hex.EncodeToString(sum[:])[:32]))
		var kind, etag string
		if err == nil {
			lines := strings.Split(string(data), "\n")
			if len(lines) >= 4 {
				kind, etag = lines[1], lines[2]
				if lines[3] != k {
					return false, fmt.Sprintf("%q: effect names key %q", k, lines[3])
				}
			}
		}
		info, herr := s.Head(ctx, k)
		switch {
		case errors.Is(herr, objstore.ErrNotFound):
			if kind == "created" {
				return false, fmt.Sprintf("%q: deleted in the bucket, effect says created %s", k, etag)
			}
		case herr != nil:
			return false, herr.Error()
		case kind != "created" || etag != info.ETag:
			return false, fmt.Sprintf("%q: bucket has %s, effect says %q %q", k, info.ETag, kind, etag)
		}
	}
	return true, ""
}

func waitMatch(t *testing.T, s *objstore.Store, dir string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := effectsMatch(s, dir)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("handler effects do not match the bucket after %s: %s", within, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// e2eSetup starts cairn serve with the effect handler and a MinIO of its own
// whose webhook target posts to it.
type e2e struct {
	port            int
	effects, ledger string
	store           *objstore.Store
	serveArgs       []string
	serveEnv        []string
}

func newE2E(t *testing.T, slow string) *e2e {
	t.Helper()
	dir, err := os.MkdirTemp("", "cairn-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Orphaned handlers of a killed daemon may still be finishing.
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	port, err := services.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := &e2e{port: port, effects: filepath.Join(dir, "effects"), ledger: filepath.Join(dir, "ledger.db")}
	if err := os.MkdirAll(e.effects, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "handler.sh")
	if err := os.WriteFile(script, []byte(effectScript), 0o755); err != nil {
		t.Fatal(err)
	}
	e.serveArgs = []string{"--ledger", e.ledger, "--handler-exec", script, "--lease", "2s", "--concurrency", "4"}
	e.serveEnv = []string{"EFFECTS=" + e.effects, "SLOW=" + slow, "CAIRN_WEBHOOK_TOKEN=e2e-token"}
	return e
}

func (e *e2e) serve(t *testing.T) *serveProc {
	return startServe(t, e.port, e.serveEnv, e.serveArgs...)
}

// minio starts a MinIO whose webhook target posts to cairn serve.
func (e *e2e) minio(t *testing.T) {
	t.Helper()
	e.minioWith(t, "arn:minio:sqs::CAIRN:webhook",
		"MINIO_NOTIFY_WEBHOOK_ENABLE_CAIRN=on",
		fmt.Sprintf("MINIO_NOTIFY_WEBHOOK_ENDPOINT_CAIRN=http://127.0.0.1:%d/v1/events", e.port),
		"MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_CAIRN=e2e-token",
		"MINIO_NOTIFY_WEBHOOK_QUEUE_DIR_CAIRN="+filepath.Join(t.TempDir(), "queue"))
}

// minioWith starts a MinIO with notification target env and subscribes a
// fresh bucket to the target arn.
func (e *e2e) minioWith(t *testing.T, arn string, env ...string) {
	t.Helper()
	ep := testenv.OwnMinIO(t, env...)
	b, url := testenv.NewBucket(t, ep)
	u, _ := objstore.ParseURL(url)
	notify(t, b.Client(), u.Host, arn)
	e.store = objstore.New(b, nil)
}

// listenLoopback keeps in-process brokers on 127.0.0.1.
func listenLoopback(network, _ string) (net.Listener, error) {
	return net.Listen(network, "127.0.0.1:0")
}

// TestServeMinIOWebhook: MinIO's webhook target posts to cairn serve; puts,
// overwrites and deletes of awkward keys end with the exec handler's effects
// matching the bucket exactly, each (key, sequencer) run once.
func TestServeMinIOWebhook(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "0")
	e.serve(t)
	e.minio(t)
	writeWorkload(t, e.store, 4)
	waitMatch(t, e.store, e.effects, 60*time.Second)
	runs, err := os.ReadFile(filepath.Join(e.effects, "runs.log"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(runs)), "\n") {
		parts := strings.Split(line, "|")
		seen[parts[0]+"|"+parts[1]]++
	}
	for ks, n := range seen {
		if n > 1 {
			t.Errorf("%s handled %d times", ks, n)
		}
	}
}

// TestServeKilled: kill -9 cairn serve while handlers run (they die with it),
// restart it: every change is processed and the effects, committed
// conditionally on the fencing token, match the bucket.
func TestServeKilled(t *testing.T) {
	t.Parallel()
	testServeKilled(t, newE2E(t, "0.3"))
}

// TestServeKilledObjectLedger: the same with the ledger kept in an object
// store (the directory store): the restarted daemon finds the dead one's
// claims through the work index once their leases expire.
func TestServeKilledObjectLedger(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "0.3")
	e.serveArgs[1] = "file://" + filepath.ToSlash(e.ledger) + "?shards=4"
	testServeKilled(t, e)
}

// TestServeKilledObjectLedgerOnS3Servers: the same with the ledger in a
// bucket of every S3 server the suite runs (the events still come from a
// MinIO of the test's own, the one server here that sends them). A server
// whose conditions cannot carry the ledger makes serve refuse to start,
// which fails the test: the object-store ledger needs put-if-absent and
// put-if-match, which all of them enforce.
func TestServeKilledObjectLedgerOnS3Servers(t *testing.T) {
	t.Parallel()
	for _, server := range testenv.S3ServerNames() {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			ep := testenv.S3Server(t, server)
			_, url := testenv.NewBucket(t, ep)
			bucket, query, _ := strings.Cut(strings.TrimPrefix(url, "s3://"), "?")
			e := newE2E(t, "0.3")
			e.serveArgs[1] = "s3://" + bucket + "/ledger?" + query + "&shards=4"
			e.serveEnv = append(e.serveEnv, ep.Env()...)
			testServeKilled(t, e)
		})
	}
}

func testServeKilled(t *testing.T, e *e2e) {
	p := e.serve(t)
	e.minio(t)
	writeWorkload(t, e.store, 3)
	// Kill while handlers are running: as soon as the first effects land.
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(e.effects, "runs.log"))
		if len(data) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no handler ran in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()
	writeWorkload(t, e.store, 2) // MinIO queues these while cairn is down
	e.serve(t)
	waitMatch(t, e.store, e.effects, 90*time.Second)
	// The restarted daemon took over claims: tokens above 1 were handed out.
	runs, _ := os.ReadFile(filepath.Join(e.effects, "runs.log"))
	maxTok := 0
	for _, line := range strings.Split(strings.TrimSpace(string(runs)), "\n") {
		parts := strings.Split(line, "|")
		if n, _ := strconv.Atoi(parts[len(parts)-1]); n > maxTok {
			maxTok = n
		}
	}
	if maxTok < 2 {
		t.Logf("no key needed a second claim (runs: %d lines)", strings.Count(string(runs), "\n"))
	}
}

// TestServeAuditEvery: with no notifications at all, `cairn serve
// --audit-every` finds every change by LIST and the handler's effects end up
// matching the bucket (creations, overwrites and deletions).
func TestServeAuditEvery(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "0")
	dir := t.TempDir()
	s, err := objstore.Open(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.store = s
	e.serveArgs = append(e.serveArgs, "--store", dir, "--bucket", "demo", "--audit-every", "200ms", "--audit-grace", "1ns")
	e.serve(t)
	writeWorkload(t, e.store, 3)
	waitMatch(t, e.store, e.effects, 60*time.Second)
}

// overlapScript is an exec handler that proves a key's handlers never
// overlap. Attempt 1 holds the key for $HOLD seconds in a grandchild (sleep,
// waited for) and in backgrounded work that outlives the script; every run
// first checks that no process of an earlier token is still alive (a zombie
// runs nothing) and logs "overlap" if one is. A process is its pid and its
// start time (field 22 of /proc/PID/stat): pids wrap (pid_max is 32,768 on
// some machines) and a pid alone can name a newer, unrelated process.
const overlapScript = `#!/bin/sh
tok=$CAIRN_ATTEMPT # the claim's ordinal: 1, then 2 after the restart (fencing tokens start at the claim's clock)
st() { cut -d' ' -f22 "/proc/$1/stat" 2>/dev/null; }
while read -r kind t pid start; do
  case $kind in start|child) ;; *) continue ;; esac
  [ "$t" -lt "$tok" ] || continue
  if [ -r "/proc/$pid/stat" ] && [ "$(cut -d' ' -f3 "/proc/$pid/stat")" != Z ] && [ "$(st "$pid")" = "$start" ]; then
    echo "overlap $tok $pid $start" >> "$MARKS"
  fi
done < "$MARKS"
echo "start $tok $$ $(st $$)" >> "$MARKS"
if [ "$tok" = 1 ]; then
  (sleep "$HOLD"; echo "late $tok 0 0" >> "$MARKS") &
  echo "child $tok $! $(st $!)" >> "$MARKS"
  sleep "$HOLD" &
  echo "child $tok $! $(st $!)" >> "$MARKS"
  wait $!
fi
echo "end $tok $$ $(st $$)" >> "$MARKS"
`

// TestServeKilledHandlerDies: kill -9 of cairn serve during a slow exec
// handler takes the handler's whole process group with it (grandchildren and
// backgrounded work included), so when the restarted daemon claims the key
// again (token 2) nothing of token 1 is running: by the watchdog; with the
// watchdog killed too (pkill -9 cairn), by the group's leader, which kills
// its group when the daemon's pipe closes; with the leaders killed as well,
// by the restarted daemon's start-up reap.
func TestServeKilledHandlerDies(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux /proc")
	}
	for _, tc := range []struct {
		name string
		kill killSet
	}{{"watchdog", 0}, {"serve-and-watchdog", killWatchdog}, {"startup-reap", killWatchdog | killLeaders}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i := range overlapIterations {
				testServeKilledHandlerDies(t, i, tc.kill)
			}
		})
	}
}

// killSet says which of serve's helpers a test kills before serve.
type killSet int

const (
	killWatchdog killSet = 1 << iota
	killLeaders          // the handlers' process group leaders
)

const overlapIterations = 3

func testServeKilledHandlerDies(t *testing.T, iter int, kill killSet) {
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	if err := os.WriteFile(marks, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "handler.sh")
	if err := os.WriteFile(script, []byte(overlapScript), 0o755); err != nil {
		t.Fatal(err)
	}
	port, err := services.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--ledger", filepath.Join(dir, "ledger.db"), "--handler-exec", script, "--lease", "2s", "--concurrency", "2"}
	// Token 1's work holds far longer than the test runs: whatever of it
	// outlives the kill is then still alive when the checks look, and no
	// fixed wait for it to end is needed. Survivors, if the reap fails, are
	// killed at the end, with their process group (the sleep in the
	// backgrounded subshell has no mark).
	env := []string{"MARKS=" + marks, "HOLD=600"}
	t.Cleanup(func() {
		for _, k := range readMarks(t, marks) {
			if k.tok == 1 && k.alive() {
				if pgid, err := syscall.Getpgid(k.pid); err == nil && pgid > 1 {
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
				}
				_ = syscall.Kill(k.pid, syscall.SIGKILL)
			}
		}
	})
	p := startServe(t, port, env, args...)
	body := fmt.Sprintf(`{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put","eventTime":"2025-01-01T00:00:00Z",`+
		`"s3":{"bucket":{"name":"b"},"object":{"key":"k%d","size":1,"eTag":"e1","sequencer":"0A"}}}]}`, iter)
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/events", port), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("webhook: %s", resp.Status)
	}
	waitMarks(t, marks, func(m []mark) bool { return countMarks(m, "child", 1) == 2 })
	var victims []int
	if kill&killWatchdog != 0 {
		victims = childrenNamed(p.cmd.Process.Pid, "cairn-exec-watchdog")
		if len(victims) != 1 {
			t.Fatalf("iteration %d: want cairn serve's one watchdog, found %v", iter, victims)
		}
	}
	if kill&killLeaders != 0 {
		leaders := childrenNamed(p.cmd.Process.Pid, "handler-group-leader")
		if len(leaders) != 1 {
			t.Fatalf("iteration %d: want the handler's one group leader, found %v", iter, leaders)
		}
		victims = append(victims, leaders...)
	}
	// The watchdog dies first, and is gone before the daemon is killed:
	// killed after the daemon, it could notice the daemon's death in between
	// and kill the group itself, and then nothing is left for the reap to
	// test (a CI flake). Freezing it with SIGSTOP is not enough: the daemon's
	// death orphans the watchdog's process group, and the kernel sends a
	// group with a stopped member SIGHUP and SIGCONT (POSIX), which woke the
	// watchdog to do its work on a loaded machine.
	for _, pid := range victims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		deadline := time.Now().Add(10 * time.Second)
		for alive(pid) { // a zombie until the daemon, its parent, dies
			if time.Now().After(deadline) {
				t.Fatalf("iteration %d: the watchdog %d outlived SIGKILL by 10s", iter, pid)
			}
			time.Sleep(time.Millisecond)
		}
	}
	p.kill()
	var tok1 []mark
	for _, k := range readMarks(t, marks) {
		if k.tok == 1 && k.pid > 0 {
			tok1 = append(tok1, k)
		}
	}
	if kill&killLeaders != 0 {
		// Only the command dies with the daemon (parent-death signal): the
		// grandchildren are left for the restarted daemon's reap.
		time.Sleep(200 * time.Millisecond)
		if !slices.ContainsFunc(tok1, mark.alive) {
			t.Fatalf("iteration %d: nothing of token 1 outlived daemon and watchdog: the reap is not tested", iter)
		}
	} else {
		// The watchdog, or the group's leader, kills the whole group at
		// once, restart or not.
		deadline := time.Now().Add(5 * time.Second)
		for slices.ContainsFunc(tok1, mark.alive) {
			if time.Now().After(deadline) {
				t.Fatalf("iteration %d: token 1's processes %v outlived the daemon by 5s", iter, tok1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	startServe(t, port, env, args...)
	waitMarks(t, marks, func(m []mark) bool { return countMarks(m, "end", 2) == 1 })
	for _, k := range readMarks(t, marks) {
		switch {
		case k.kind == "overlap":
			t.Errorf("iteration %d: token %d started while pid %d of an earlier token was alive", iter, k.tok, k.pid)
		case k.tok == 1 && (k.kind == "end" || k.kind == "late"):
			t.Errorf("iteration %d: token 1's handler outlived the killed daemon (%s)", iter, k.kind)
		case k.tok == 1 && k.alive():
			t.Errorf("iteration %d: pid %d of token 1 (%s) still alive", iter, k.pid, k.kind)
		}
	}
	if t.Failed() {
		data, _ := os.ReadFile(marks)
		t.Fatalf("marks:\n%s", data)
	}
}

type mark struct {
	kind     string
	tok, pid int
	start    string // the process's start time, field 22 of /proc/PID/stat
}

// alive reports whether the process the mark names still runs: same pid,
// same start time, not a zombie.
func (k mark) alive() bool { return alive(k.pid) && procStart(k.pid) == k.start }

func procStart(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:]) // from field 3 (state) on
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22
}

func readMarks(t *testing.T, path string) []mark {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ms []mark
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var k mark
		if _, err := fmt.Sscan(line, &k.kind, &k.tok, &k.pid, &k.start); err == nil {
			ms = append(ms, k)
		}
	}
	return ms
}

func countMarks(ms []mark, kind string, tok int) int {
	n := 0
	for _, k := range ms {
		if k.kind == kind && k.tok == tok {
			n++
		}
	}
	return n
}

func waitMarks(t *testing.T, path string, ok func([]mark) bool) []mark {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := readMarks(t, path)
		if ok(m) {
			return m
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(path)
			t.Fatalf("handler marks not reached in 30s:\n%s", data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// childrenNamed lists the children of ppid whose argv[0] is name.
func childrenNamed(ppid int, name string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if arg0, _, _ := strings.Cut(string(cmdline), "\x00"); arg0 == name {
			pids = append(pids, pid)
		}
	}
	return pids
}
