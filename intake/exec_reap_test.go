//go:build linux

package intake

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/event"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// The test binary serves as its own exec handler watchdog.
func init() { WatchdogMain() }

// alive reports whether pid runs (a zombie runs nothing).
func alive(pid int) bool {
	p, err := readStat(pid)
	return err == nil && !p.zombie
}

// startGroup starts a shell leading its own process group with a grandchild
// sleep, and returns the leader and the grandchild.
func startGroup(t *testing.T, env ...string) (*exec.Cmd, int) {
	t.Helper()
	// The leader outlives its child by a minute: only a kill ends it early.
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & echo $!; wait; sleep 60")
	cmd.Env = append(os.Environ(), env...)
	testenv.KillGroupAtCleanup(t, cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return cmd, child
}

// writeRecord writes a run record as a process would have.
func writeRecord(t *testing.T, dir string, rec runRecord) string {
	t.Helper()
	data, _ := json.Marshal(rec)
	path := filepath.Join(dir, fmt.Sprintf("%d-%d-%s.run", rec.Owner, rec.OwnerStart, rec.Marker))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// deadOwner names this process with a start time it does not have: an owner
// that is gone (its pid reused by this test).
func deadOwner() runRecord {
	me := self()
	return runRecord{Owner: me.pid, OwnerStart: me.start + 1, Boot: bootID()}
}

func startOf(t *testing.T, pid int) uint64 {
	t.Helper()
	p, err := readStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return p.start
}

// A run recorded by a dead owner whose group is still alive is killed, the
// grandchild with the leader, and its record removed; the reap returns only
// once they are gone.
func TestReapKillsGroupOfDeadOwner(t *testing.T) {
	dir := t.TempDir()
	leader, child := startGroup(t)
	rec := deadOwner()
	rec.Marker, rec.PGID, rec.Start = "m1", leader.Process.Pid, startOf(t, leader.Process.Pid)
	path := writeRecord(t, dir, rec)
	n, err := reapDead(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("killed %d processes, want the shell and its sleep", n)
	}
	if alive(child) {
		t.Errorf("grandchild %d survived the reap", child)
	}
	if err := leader.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("leader: %v, want killed", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("record left behind: %v", err)
	}
}

// A recorded group whose leader's pid now belongs to another process (a
// different start time) is not killed: that process is a stranger.
func TestReapSparesReusedPID(t *testing.T) {
	dir := t.TempDir()
	leader, child := startGroup(t)
	rec := deadOwner()
	rec.Marker, rec.PGID, rec.Start = "m2", leader.Process.Pid, startOf(t, leader.Process.Pid)-1
	writeRecord(t, dir, rec)
	n, err := reapDead(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 || !alive(leader.Process.Pid) || !alive(child) {
		t.Errorf("killed %d: a reused pid's process (and its group) must be spared", n)
	}
}

// Runs of a live owner are not reaped (another daemon sharing the directory,
// or this process).
func TestReapSparesLiveOwner(t *testing.T) {
	dir := t.TempDir()
	leader, child := startGroup(t)
	me := self()
	writeRecord(t, dir, runRecord{Owner: me.pid, OwnerStart: me.start, Boot: bootID(), Marker: "m3",
		PGID: leader.Process.Pid, Start: startOf(t, leader.Process.Pid)})
	other, _ := startGroup(t)
	writeRecord(t, dir, runRecord{Owner: other.Process.Pid, OwnerStart: startOf(t, other.Process.Pid), Boot: bootID(), Marker: "m4",
		PGID: leader.Process.Pid, Start: startOf(t, leader.Process.Pid)})
	if n, err := reapDead(context.Background(), dir); err != nil || n != 0 || !alive(child) {
		t.Errorf("reap of live owners' runs: killed %d, %v", n, err)
	}
}

// A process that left the handler's group but carries its marker is found
// by the marker, also when the owner died before recording the group (the
// record written before the start).
func TestReapFindsMarker(t *testing.T) {
	dir := t.TempDir()
	leader, child := startGroup(t, markerEnv+"=m5")
	rec := deadOwner()
	rec.Marker = "m5"
	writeRecord(t, dir, rec)
	writeRecord(t, dir, runRecord{Owner: rec.Owner, OwnerStart: rec.OwnerStart, Boot: "another boot", Marker: "m6"})
	n, err := reapDead(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 || alive(child) || !exits(leader, 10*time.Second) {
		t.Errorf("killed %d; grandchild alive %v; leader alive %v", n, alive(child), alive(leader.Process.Pid))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("records left: %v", ents)
	}
}

// exits reports whether cmd ends within d (killed: it cannot end by itself
// that soon, see startGroup).
func exits(cmd *exec.Cmd, d time.Duration) bool {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func handle(t *testing.T, h *ExecHandler) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := h.Handle(context.Background(), Work{Event: event.Event{Bucket: "b", Key: "k", Kind: event.Created}, Token: 1, Attempt: 1})
		done <- err
	}()
	return done
}

// waitPID waits for a handler to write a pid to path.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		if s := strings.TrimSpace(string(data)); strings.HasSuffix(string(data), "\n") {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("handler did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// What a handler leaves running in its group when it exits (backgrounded
// work) is killed before Handle returns, and its record removed.
func TestExecKillsLeftovers(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	h := Shell(`sleep 60 >/dev/null 2>&1 & echo $! > "$PIDFILE"`)
	h.Env, h.StateDir = []string{"PIDFILE=" + pidFile}, dir
	if err := <-handle(t, h); err != nil {
		t.Fatal(err)
	}
	if pid := waitPID(t, pidFile); alive(pid) {
		t.Errorf("backgrounded %d outlived its handler", pid)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("records left: %v", ents)
	}
}

// The watchdog kills a running handler's whole group when the process that
// started it lets go of it (its exit; here Close).
func TestExecWatchdog(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "pid")
	h := Shell(`sleep 60 & echo $! > "$PIDFILE"; wait`)
	h.Env, h.StateDir, h.Watchdog = []string{"PIDFILE=" + pidFile}, dir, bin
	done := handle(t, h)
	pid := waitPID(t, pidFile)
	if err := h.Close(); err != nil {
		t.Fatalf("watchdog: %v", err)
	}
	if alive(pid) {
		t.Errorf("grandchild %d outlived the watchdog", pid)
	}
	if err := <-done; err == nil {
		t.Error("a handler killed by the watchdog reported success")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("records left: %v", ents)
	}
}

// leaseCtx is a handler's context whose claim runs until until, with no
// timer of this process's own: only the watchdog stops the run.
func leaseCtx(ctx context.Context, until time.Time) context.Context {
	return leaseContext{Context: ctx, v: &validity{lease: 2 * time.Second, expire: func(error) {}, until: until, subs: map[int]func(time.Time){}}}
}

// A run the watchdog kills at its deadline is a lost lease
// (errLeaseExpired), never a failed attempt; a run whose deadline passed
// before its command started never starts.
func TestExecWatchdogDeadline(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		until time.Duration // from now
		ran   bool
	}{
		{"killed at the deadline", 300 * time.Millisecond, true},
		{"deadline passed before the start", -time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "ran")
			h := Shell(`echo > "$MARK"; exec sleep 60`)
			h.Env, h.StateDir, h.Watchdog = []string{"MARK=" + mark}, t.TempDir(), bin
			defer h.Close()
			if _, err := h.Reap(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx := leaseCtx(context.Background(), time.Now().Add(tc.until))
			_, err := h.Handle(ctx, Work{Event: event.Event{Bucket: "b", Key: "k", Kind: event.Created}, Token: 1, Attempt: 1})
			if !errors.Is(err, errLeaseExpired) {
				t.Fatalf("Handle: %v, want errLeaseExpired", err)
			}
			if _, err := os.Stat(mark); (err == nil) != tc.ran {
				t.Fatalf("the command ran: %v, want %v", err == nil, tc.ran)
			}
			if ents, _ := os.ReadDir(h.StateDir); len(ents) != 0 {
				t.Errorf("records left: %v", ents)
			}
		})
	}
}

// A process that left the run's group (setsid) but carries its marker is
// killed when the run is stopped from outside, before Handle returns.
func TestExecCancelKillsEscapee(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The escapee writes its own pid once it has left the group: "$!" is
	// known before setsid has run, which the check below once caught.
	h := Shell(`setsid sh -c 'echo $$ > "$PIDFILE"; exec sleep 60' >/dev/null 2>&1 & sleep 60`)
	h.Env, h.StateDir = []string{"PIDFILE=" + pidFile}, t.TempDir()
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.Handle(ctx, Work{Event: event.Event{Bucket: "b", Key: "k", Kind: event.Created}, Token: 1, Attempt: 1})
		done <- err
	}()
	pid := waitPID(t, pidFile)
	if p, err := readStat(pid); err != nil || p.pgrp != pid {
		t.Fatalf("the escapee %d did not leave the group: %+v %v", pid, p, err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled handler reported success")
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("escapee %d outlived its cancelled run", pid)
	}
	if ents, _ := os.ReadDir(h.StateDir); len(ents) != 0 {
		t.Errorf("records left: %v", ents)
	}
}

// The watchdog reads the extensions waiting in its pipe before it judges a
// deadline: a run whose renewal was confirmed and sent while the watchdog
// could not read (stopped here; starved, in life) is not killed at its
// older deadline.
func TestWatchdogReadsExtensionsFirst(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wd, err := startWatchdog(bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer wd.close()
	start := func() (*exec.Cmd, string) {
		run, marker, err := track(dir)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sleep", "60")
		cmd.Env, cmd.SysProcAttr = append(os.Environ(), marker...), &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		run.started(cmd.Process.Pid)
		return cmd, run.marker()
	}
	kept, m := start()
	if _, err := wd.deadline(m, time.Now().Add(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	pid := wd.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// While it is stopped: other lines, then the extension; meanwhile the
	// first deadline passes.
	wd.end("other-run-1")
	wd.end("other-run-2")
	if _, err := wd.deadline(m, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// A probe run already due: once it is killed, the watchdog has judged
	// what came before it.
	probe, n := start()
	if _, err := wd.deadline(n, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if !exits(probe, 10*time.Second) {
		t.Fatal("the watchdog did not kill a run past its deadline")
	}
	if !alive(kept.Process.Pid) {
		t.Fatal("the watchdog killed a run at a deadline an extension in its pipe had moved")
	}
}

// A run whose deadline cannot be handed to the watchdog does not start, and
// says so with errUnguarded (the pipeline releases its work uncounted: the
// cause is cairn's, not the handler's).
func TestExecUnguardedDoesNotStart(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(t.TempDir(), "ran")
	h := Shell(`echo > "$MARK"`)
	h.Env, h.StateDir, h.Watchdog = []string{"MARK=" + mark}, t.TempDir(), bin
	defer h.Close()
	if _, err := h.Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.watchdog.pipe.Close() // every write to the watchdog fails
	ctx := leaseCtx(context.Background(), time.Now().Add(time.Minute))
	_, err = h.Handle(ctx, Work{Event: event.Event{Bucket: "b", Key: "k", Kind: event.Created}, Token: 1, Attempt: 1})
	if !errors.Is(err, errUnguarded) {
		t.Fatalf("Handle: %v, want errUnguarded", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the command ran unguarded")
	}
}
