package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/cmd/cairn/internal/cli"
	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/lock/lease"
	"github.com/cairn-s3/cairn/objstore"
)

func exitOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestLockRun(t *testing.T) {
	t.Parallel()
	bin := buildCairn(t)
	dir := t.TempDir()
	url := "file://" + dir + "/locks/job"
	out, err := exec.Command(bin, "lock", "run", url, "--", "sh", "-c", "echo $CAIRN_FENCING_TOKEN; exit 7").Output()
	if exitOf(err) != 7 || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("first run: %q exit %d, want token 1 and the command's exit 7", out, exitOf(err))
	}
	holder := exec.Command(bin, "lock", "run", url, "--ttl", "1s", "--", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	time.Sleep(700 * time.Millisecond)
	if err := exec.Command(bin, "lock", "run", url, "--", "true").Run(); exitOf(err) != cli.ExitPrecondition {
		t.Fatalf("second holder with --wait 0: exit %d, want 3", exitOf(err))
	}
	st, err := exec.Command(bin, "lock", "status", url, "--json").Output()
	if err != nil || !strings.Contains(string(st), `"held":true`) || !strings.Contains(string(st), `"token":2`) {
		t.Fatalf("status: %s %v", st, err)
	}
	// Take the lease away from the running holder, as a successor would after a pause.
	ctx := context.Background()
	s, key, err := objstore.OpenObject(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := docstore.Typed[lease.State](docstore.New(s, nil)).Update(ctx, key, func(st *lease.State, _ docstore.Meta) error {
		st.Holder, st.Token = "intruder", st.Token+1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	holder.Stderr = &stderr
	done := make(chan error, 1)
	go func() { done <- holder.Wait() }()
	select {
	case err := <-done:
		if exitOf(err) != cli.ExitLeaseLost {
			t.Fatalf("holder whose lease was taken: exit %d, want 4", exitOf(err))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the holder kept running after losing its lease")
	}
	for _, args := range [][]string{{"lock", "run", url}, {"lock", "run", url, "--ttl", "10ms", "--", "true"}} {
		if err := exec.Command(bin, args...).Run(); exitOf(err) != cli.ExitUsage {
			t.Errorf("cairn %q: exit %d, want 2", args, exitOf(err))
		}
	}
}

func TestLockTree(t *testing.T) {
	t.Parallel()
	bin := buildCairn(t)
	store := t.TempDir()
	holder := exec.Command(bin, "lock", "tree", "--store", store, "--write", "/data/orders", "--ttl", "1s", "--wait", "30s",
		"--", "sh", "-c", "echo holding; exec sleep 30")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "holding\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	run := func(args ...string) int {
		return exitOf(exec.Command(bin, append([]string{"lock", "tree", "--store", store}, args...)...).Run())
	}
	if code := run("--read", "/data", "--", "true"); code != cli.ExitPrecondition {
		t.Fatalf("reading /data while /data/orders is written: exit %d, want 3", code)
	}
	if code := run("--read", "/data/customers", "--", "true"); code != 0 {
		t.Fatalf("a sibling path: exit %d, want 0", code)
	}
	if code := run("--write", "/", "--", "true"); code != cli.ExitPrecondition {
		t.Fatalf("the root while /data/orders is written: exit %d, want 3", code)
	}
	_ = holder.Process.Kill() // kill -9: its locks go when its session expires
	_ = holder.Wait()
	if code := run("--read", "/data", "--wait", "20s", "--", "true"); code != 0 {
		t.Fatalf("after the holder was killed: exit %d, want 0 once its session expired", code)
	}
	if code := run("--", "true"); code != cli.ExitUsage {
		t.Fatalf("no paths: exit %d, want 2", code)
	}
}

// The lock commands against real MinIO, through the binary.
func TestLockCommandsMinIO(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	_, url := testenv.NewBucket(t, ep)
	u, _ := objstore.ParseURL(url)
	leaseURL := "s3://" + u.Host + "/locks/deploy?" + u.RawQuery
	bin := buildCairn(t)
	run := func(args ...string) (string, int) {
		c := exec.Command(bin, args...)
		c.Env = append(c.Environ(), ep.Env()...)
		out, err := c.Output()
		return strings.TrimSpace(string(out)), exitOf(err)
	}
	for want := 1; want <= 2; want++ {
		out, code := run("lock", "run", leaseURL, "--", "sh", "-c", "echo $CAIRN_FENCING_TOKEN")
		if code != 0 || out != strconv.Itoa(want) {
			t.Fatalf("lock run #%d on MinIO: %q exit %d", want, out, code)
		}
	}
	if out, code := run("lock", "status", leaseURL, "--json"); code != 0 || !strings.Contains(out, `"held":false`) || !strings.Contains(out, `"token":2`) {
		t.Fatalf("lock status: %s %d", out, code)
	}
	if out, code := run("lock", "tree", "--store", url, "--write", "/datasets/orders", "--", "echo", "tree ok"); code != 0 || out != "tree ok" {
		t.Fatalf("lock tree on MinIO: %q exit %d", out, code)
	}
}

// The command gets the fencing token of every path it names: one more than
// the path's last, also after the lock documents were cleaned up.
func TestLockTreeFencingTokens(t *testing.T) {
	t.Parallel()
	bin := buildCairn(t)
	store := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command(bin, append(append([]string{"lock", "tree", "--store", store}, args...),
			"--", "sh", "-c", `echo "$CAIRN_FENCING_TOKEN $CAIRN_FENCING_TOKENS"`)...)
		out, err := c.Output()
		if err != nil {
			t.Fatalf("cairn lock tree %q: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	if out := run("--write", "/data/orders"); out != "1 /data/orders=1" {
		t.Fatalf("first lock of /data/orders: token and tokens %q, want %q", out, "1 /data/orders=1")
	}
	if out := run("--write", "/data/orders/"); out != "2 /data/orders/=2" {
		t.Fatalf("second lock of /data/orders: %q, want %q", out, "2 /data/orders/=2")
	}
	out := run("--read", "/reference", "--write", "/data/orders", "--read", "/reference")
	token, tokens, _ := strings.Cut(out, " ")
	ref, orders, ok := strings.Cut(tokens, ",")
	if !ok || !strings.HasPrefix(ref, "/reference=") || orders != "/data/orders=3" || token != "3" {
		t.Fatalf("reading /reference and writing /data/orders: %q, want the write path's token 3 first, then /reference=N,/data/orders=3", out)
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(ref, "/reference=")); err != nil || n < 1 {
		t.Fatalf("token of /reference in %q", out)
	}
}

// On MinIO, through the binary: commands leave no lock objects but the
// root's (each left a session and a node per new path before), and a holder
// killed with kill -9 has its objects removed by a later command that waits
// for its lock.
func TestLockTreeCleansUpMinIO(t *testing.T) {
	t.Parallel()
	ep := testenv.S3(t)
	bk, url := testenv.NewBucket(t, ep)
	s := objstore.New(bk, nil)
	bin := buildCairn(t)
	command := func(args ...string) *exec.Cmd {
		c := exec.Command(bin, append([]string{"lock", "tree", "--store", url}, args...)...)
		c.Env = append(c.Environ(), ep.Env()...)
		return c
	}
	objects := func() []string {
		t.Helper()
		infos, err := s.ListAll(context.Background(), "cairn-locks/", nil)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, in := range infos {
			keys = append(keys, in.Key)
		}
		return keys
	}
	for i := range 6 {
		if out, err := command("--write", "/runs/"+strconv.Itoa(i)+"/out", "--", "true").CombinedOutput(); err != nil {
			t.Fatalf("lock tree #%d: %v %s", i, err, out)
		}
		if keys := objects(); len(keys) != 1 {
			t.Fatalf("after %d commands: %d lock objects %v, want only the root's", i+1, len(keys), keys)
		}
	}
	holder := command("--write", "/runs/held", "--ttl", "1s", "--", "sh", "-c", "echo holding; exec sleep 60")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "holding\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	_ = holder.Process.Kill() // kill -9: no release, no Close
	_ = holder.Wait()
	if keys := objects(); len(keys) < 4 {
		t.Fatalf("the killed holder left %v, want its session and three nodes", keys)
	}
	if out, err := command("--write", "/runs", "--ttl", "1s", "--wait", "1m", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("lock tree after the holder was killed: %v %s", err, out)
	}
	if keys := objects(); len(keys) != 1 {
		t.Fatalf("after a later command: %d lock objects %v, want only the root's", len(keys), keys)
	}
}

// What a command run under a lock leaves running in its process group
// (background jobs) is killed before the lock is released, for lock run and
// lock tree: nothing of the command works on unguarded.
func TestLockRunKillsLeftovers(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to tell a live process")
	}
	bin := buildCairn(t)
	for _, kind := range []string{"run", "tree"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pid")
			args := []string{"lock", "run", "file://" + dir + "/locks/job"}
			if kind == "tree" {
				args = []string{"lock", "tree", "--store", "file://" + dir, "--write", "/job"}
			}
			args = append(args, "--", "sh", "-c", `sleep 60 >/dev/null 2>&1 & echo $! > "$PIDFILE"`)
			c := exec.Command(bin, args...)
			c.Env = append(os.Environ(), "PIDFILE="+pidFile)
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("cairn %q: %v\n%s", args, err, out)
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			// A SIGKILL sent is not yet a process gone: give it a moment.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
				if err != nil || strings.Contains(string(stat), ") Z ") {
					break
				}
				if time.Now().After(deadline) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("the command's background job %d outlived its lock", pid)
				}
			}
		})
	}
}
