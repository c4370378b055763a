package intake

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A run record says that a process of this machine started an exec handler:
// it is written to ExecHandler.StateDir before the command starts (then only
// the marker is known), rewritten once it runs (its process group and the
// leader's start time), and removed once nothing of the group is left. The
// owner is the process that started it, named by pid and start time; a record
// whose owner is gone is reaped. No fsync: the records only have to survive
// the death of a process (the page cache does), and a reboot kills everything
// they name (the boot id tells stale records apart).
type runRecord struct {
	Owner      int    `json:"owner"`
	OwnerStart uint64 `json:"owner_start"`
	Boot       string `json:"boot"`
	Marker     string `json:"marker"`
	PGID       int    `json:"pgid,omitempty"`
	Start      uint64 `json:"start,omitempty"` // the leader's, in clock ticks since boot
}

// markerEnv names the environment variable every handler process carries
// (and its descendants inherit): what a reap finds processes by when they have
// left the handler's process group.
const markerEnv = "CAIRN_HANDLER_RUN"

// watchdogArg0 is the argv[0] by which WatchdogMain knows it was started as
// a watchdog.
const watchdogArg0 = "cairn-exec-watchdog"

// procInfo is what a reap needs of /proc/PID/stat.
type procInfo struct {
	pid, ppid, pgrp int
	start           uint64
	zombie          bool
}

func readStat(pid int) (procInfo, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command name may hold anything
	if i < 0 {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	p := procInfo{pid: pid, zombie: f[0] == "Z" || f[0] == "X"}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgrp, _ = strconv.Atoi(f[2])
	p.start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procInfo{}, fmt.Errorf("/proc/%d/stat: start time: %v", pid, err)
	}
	return p, nil
}

var bootID = sync.OnceValue(func() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
})

// self is this process as an owner.
var self = sync.OnceValue(func() procInfo {
	p, _ := readStat(os.Getpid())
	return p
})

// ownerAlive reports whether the process that wrote a record still runs.
func ownerAlive(pid int, start uint64) bool {
	p, err := readStat(pid)
	return err == nil && !p.zombie && p.start == start
}

// runTrack follows one handler run in the state directory.
type runTrack struct {
	path string
	rec  runRecord
}

// track writes the record of a run about to start and returns the
// environment the command must carry. dir "" tracks nothing.
func track(dir string) (*runTrack, []string, error) {
	if dir == "" {
		return nil, nil, nil
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	me := self()
	r := &runTrack{rec: runRecord{Owner: me.pid, OwnerStart: me.start, Boot: bootID(), Marker: hex.EncodeToString(b[:])}}
	r.path = filepath.Join(dir, fmt.Sprintf("%d-%d-%s.run", me.pid, me.start, r.rec.Marker))
	if err := r.write(); err != nil {
		return nil, nil, fmt.Errorf("intake: recording the handler run: %w", err)
	}
	return r, []string{markerEnv + "=" + r.rec.Marker}, nil
}

func (r *runTrack) write() error {
	data, _ := json.Marshal(r.rec)
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.path)
}

// marker names the run to the watchdog.
func (r *runTrack) marker() string {
	if r == nil {
		return ""
	}
	return r.rec.Marker
}

// started records the process group of the command just started. If that
// fails the marker still finds the group.
func (r *runTrack) started(pid int) {
	if r == nil {
		return
	}
	p, err := readStat(pid)
	if err != nil {
		return // already gone (and reaped by Wait only later: cannot be)
	}
	r.rec.PGID, r.rec.Start = pid, p.start
	_ = r.write()
}

// finish kills what the run left behind in its process group, waits for it
// to be gone and forgets the run. With sweep (the run was stopped from
// outside: cancelled, or at its deadline), it also kills every process that
// carries the run's marker, as a reap does: one that left the group (setsid,
// a double fork) must not outlive a run whose claim is gone. A group or a
// carrier that will not die (a process stuck in the kernel) keeps the
// record, so the next start-up reaps it.
func (r *runTrack) finish(pgid int, sweep bool) {
	if killGroup(pgid) && !waitGone(pgid, 5*time.Second) {
		return
	}
	if r == nil {
		return
	}
	if sweep && !r.sweep(5*time.Second) {
		return
	}
	_ = os.Remove(r.path)
}

// sweep kills the run's processes wherever they are (its group and every
// carrier of its marker) and reports whether they were gone within the time.
func (r *runTrack) sweep(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		targets := reapTargets([]runRecord{r.rec})
		if len(targets) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		for pid, pgid := range targets {
			if pgid > 0 {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitGone waits until no live process is left in group pgid.
func waitGone(pgid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		gone := true
		scanProc(func(p procInfo) {
			if p.pgrp == pgid && !p.zombie {
				gone = false
			}
		})
		if gone {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(5 * time.Millisecond)
	}
}

// scanProc calls f for every process.
func scanProc(f func(procInfo)) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := readStat(pid); err == nil {
			f(p)
		}
	}
}

// environMarker returns pid's CAIRN_HANDLER_RUN, if readable.
func environMarker(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	for kv := range strings.SplitSeq(string(data), "\x00") {
		if v, ok := strings.CutPrefix(kv, markerEnv+"="); ok {
			return v
		}
	}
	return ""
}

// reapDir kills every process of the runs recorded in dir that want
// accepts (by owner and marker), waits until they are gone and removes their
// records. It returns how many processes it killed.
func reapDir(ctx context.Context, dir string, want func(owner int, ownerStart uint64, marker string) bool) (int, error) {
	if dir == "" {
		return 0, nil
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("intake: reading handler records: %w", err)
	}
	var recs []runRecord
	var paths []string
	for _, e := range ents {
		name := e.Name()
		base, isTmp := strings.CutSuffix(name, ".tmp")
		f := strings.SplitN(strings.TrimSuffix(base, ".run"), "-", 3)
		if !strings.HasSuffix(base, ".run") || len(f) != 3 {
			continue
		}
		owner, err1 := strconv.Atoi(f[0])
		ostart, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil || !want(owner, ostart, f[2]) {
			continue
		}
		path := filepath.Join(dir, name)
		if isTmp { // a record being written when its owner died: the command had not started
			_ = os.Remove(path)
			continue
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // finished meanwhile, or reaped by another
		}
		var rec runRecord
		if err != nil || json.Unmarshal(data, &rec) != nil {
			return 0, fmt.Errorf("intake: unreadable handler record %s: %v", path, err)
		}
		paths = append(paths, path)
		if rec.Boot != bootID() {
			continue // from before a reboot: nothing of it runs
		}
		recs = append(recs, rec)
	}
	killed := map[int]bool{}
	for len(recs) > 0 {
		targets := reapTargets(recs)
		if len(targets) == 0 {
			break
		}
		for pid, pgid := range targets {
			if pgid > 0 {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed[pid] = true
			}
		}
		select {
		case <-ctx.Done():
			return len(killed), fmt.Errorf("intake: handlers of a dead daemon still running (pids %v): %w", keys(targets), context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
	for _, p := range paths {
		_ = os.Remove(p)
	}
	return len(killed), nil
}

func keys(m map[int]int) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// reapTargets finds the live processes of recs: members of a recorded
// process group (unless the group's number now belongs to another process:
// the leader's pid reused, told by its start time) and carriers of a recorded
// marker. It maps each pid to the group to kill with it (0: the process
// alone).
func reapTargets(recs []runRecord) map[int]int {
	var procs []procInfo
	scanProc(func(p procInfo) { procs = append(procs, p) })
	groups := map[int]runRecord{}
	markers := map[string]bool{}
	for _, r := range recs {
		markers[r.Marker] = true
		if r.PGID > 0 {
			groups[r.PGID] = r
		}
	}
	for _, p := range procs {
		if r, ok := groups[p.pid]; ok && p.start != r.Start {
			delete(groups, p.pid) // the pid is another process's now: the group is long gone
		}
	}
	me := os.Getpid()
	targets := map[int]int{}
	for _, p := range procs {
		if p.zombie || p.pid == me {
			continue
		}
		if r, ok := groups[p.pgrp]; ok && p.start >= r.Start {
			targets[p.pid] = p.pgrp
			continue
		}
		if m := environMarker(p.pid); m != "" && markers[m] {
			targets[p.pid] = 0
		}
	}
	return targets
}

// reapDead reaps the runs of owners that are gone.
func reapDead(ctx context.Context, dir string) (int, error) {
	me := self()
	return reapDir(ctx, dir, func(owner int, start uint64, _ string) bool {
		return !(owner == me.pid && start == me.start) && !ownerAlive(owner, start)
	})
}

// startTied starts cmd so that its leader gets SIGKILL when this process
// dies. The kernel sends it when the thread that forked exits, so the fork
// happens on a thread locked for the purpose (the Go runtime only ends a
// thread when a goroutine exits while locked to it; see the package doc).
func startTied(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd.Start()
}

// watchdog is a process that outlives this one by the time it takes to kill
// what this one's handlers left running, and that holds each running
// handler's lease deadline, so that a handler is killed at its deadline even
// while this process cannot act (stopped, starved, frozen).
//
// # The protocol
//
// Its stdin is a pipe from this process. EOF (this process exited, however
// it exited) makes it kill every run of this process and exit. Lines set and
// clear a run's deadline:
//
//	deadline MARKER NANOSECONDS   kill run MARKER at this CLOCK_BOOTTIME time
//	end MARKER                    run MARKER is over: forget it
//
// The deadline is absolute on CLOCK_BOOTTIME, a clock every process of the
// machine reads alike and that, unlike CLOCK_MONOTONIC, runs on while the
// machine is suspended (as the ledger's clock does), never a duration from the message's receipt: a
// message that waits in the pipe (this process stopped just after writing it,
// the watchdog slow to read) then extends nothing beyond what the renewal
// proved. This process computes it by reading CLOCK_BOOTTIME before its own
// clock, so that a stall between the two readings can only make it earlier.
// A run's first deadline is sent before its command starts (a command never
// runs unguarded), and each later one after a renewal succeeded; a deadline
// that could not be sent leaves the earlier one in force, which only kills
// sooner. At a deadline the watchdog kills the run as a reap does (its
// process group, and every process carrying its marker), whether or not this
// process has noticed.
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // its stdin: EOF when this process exits, however it exits
	mu   sync.Mutex
}

// watchdogWriteTimeout bounds one message to the watchdog: a watchdog that
// does not read is no reason to hold a renewal up (its last deadline stays).
const watchdogWriteTimeout = 200 * time.Millisecond

// bootNow reads CLOCK_BOOTTIME: CLOCK_MONOTONIC that also counts the time
// the machine was suspended, as the ledger's clock does. A suspend therefore
// ends with every deadline that passed meanwhile due at once.
func bootNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return ts.Nano()
}

// clockPassed reports whether at (on CLOCK_BOOTTIME, 0: none) has come.
func clockPassed(at int64) bool { return at > 0 && bootNow() >= at }

// send writes one line to the watchdog.
func (w *watchdog) send(line string) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.pipe.SetWriteDeadline(time.Now().Add(watchdogWriteTimeout))
	_, err := w.pipe.WriteString(line)
	return err
}

// deadline tells the watchdog to kill run marker at until (on this
// process's monotonic clock), and returns that moment on the watchdog's
// clock.
func (w *watchdog) deadline(marker string, until time.Time) (int64, error) {
	if w == nil {
		return 0, nil
	}
	m := bootNow() // first: a stall before time.Now() makes the deadline earlier, never later
	at := m + int64(time.Until(until))
	return at, w.send(fmt.Sprintf("deadline %s %d\n", marker, at))
}

// end tells the watchdog that run marker is over.
func (w *watchdog) end(marker string) {
	_ = w.send("end " + marker + "\n")
}

// startWatchdog starts bin (whose main calls WatchdogMain) as the watchdog of
// this process's runs in dir.
func startWatchdog(bin, dir string) (*watchdog, error) {
	if bin == "" || dir == "" {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	me := self()
	cmd := &exec.Cmd{Path: bin, Args: []string{watchdogArg0, dir, strconv.Itoa(me.pid), strconv.FormatUint(me.start, 10)},
		Stdin: r, Stderr: os.Stderr,
		// Its own group: a terminal's ^C or a kill of cairn's group leaves it
		// to do its work once cairn is gone.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("intake: starting the exec handler watchdog %s: %w", bin, err)
	}
	return &watchdog{cmd: cmd, pipe: w}, nil
}

// close tells the watchdog to reap this process's runs now (there should be
// none left) and waits for it.
func (w *watchdog) close() error {
	if w == nil {
		return nil
	}
	w.pipe.Close()
	return w.cmd.Wait()
}

// WatchdogMain serves the exec handler watchdog when this process was started
// as one, and otherwise returns at once. A program that sets
// ExecHandler.Watchdog to its own executable calls it first thing in main
// (cairn's main does). The watchdog waits until the process that started it
// exits, however it exits (kill -9 included), then kills every process of
// that process's running handlers (their whole process groups, and every
// process carrying their CAIRN_HANDLER_RUN) and exits. Meanwhile it kills
// each run whose lease deadline passes (see the watchdog type's protocol),
// whether or not the process that started it can act.
func WatchdogMain() {
	if len(os.Args) != 4 || os.Args[0] != watchdogArg0 {
		watchdogServed.Store(true)
		return
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	dir := os.Args[1]
	owner, err1 := strconv.Atoi(os.Args[2])
	start, err2 := strconv.ParseUint(os.Args[3], 10, 64)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "cairn exec watchdog: bad arguments")
		os.Exit(2)
	}
	mine := func(o int, s uint64) bool { return o == owner && s == start }
	// The reader never waits for the judging loop (up to the channel's
	// room), so the owner's writes to the pipe do not back up while runs
	// are killed.
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadlines := map[string]int64{} // marker → CLOCK_BOOTTIME ns
	// take applies one line, or reaps everything at EOF (and exits).
	take := func(line string, ok bool) {
		if !ok {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := reapDir(ctx, dir, func(o int, s uint64, _ string) bool { return mine(o, s) })
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, "cairn exec watchdog:", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "deadline":
			if d, err := strconv.ParseInt(f[2], 10, 64); err == nil && d > deadlines[f[1]] {
				deadlines[f[1]] = d
			}
		case len(f) == 2 && f[0] == "end":
			delete(deadlines, f[1])
		}
	}
	t := time.NewTimer(time.Hour)
	for {
		// Extensions already in the pipe count before any deadline is
		// judged: the owner may have been slower to write than to renew.
	drain:
		for {
			select {
			case line, ok := <-lines:
				take(line, ok)
			default:
				break drain
			}
		}
		// Kill every run whose deadline has passed at once, then sleep
		// until the next deadline.
		now := bootNow()
		next := int64(-1)
		var due []string
		for marker, d := range deadlines {
			if d <= now {
				delete(deadlines, marker)
				due = append(due, marker)
				continue
			}
			if next < 0 || d < next {
				next = d
			}
		}
		if len(due) > 0 {
			killDue(dir, owner, start, due)
		}
		wait := time.Hour
		if next >= 0 {
			wait = time.Duration(next - bootNow())
		}
		t.Reset(max(wait, 0))
		select {
		case line, ok := <-lines:
			take(line, ok)
		case <-t.C:
		}
	}
}

// killDue kills the process groups of the runs whose deadline passed, all
// at once and without waiting, then sweeps (in the background: the
// watchdog's other deadlines do not wait for it) for every process of those
// runs, their marker carriers outside the group included, until they are
// gone.
func killDue(dir string, owner int, ownerStart uint64, markers []string) {
	set := map[string]bool{}
	for _, m := range markers {
		set[m] = true
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d-%d-%s.run", owner, ownerStart, m)))
		var rec runRecord
		if err != nil || json.Unmarshal(data, &rec) != nil || rec.PGID <= 0 {
			continue // no group recorded (yet): the sweep finds its processes by marker
		}
		if p, err := readStat(rec.PGID); err == nil && p.start != rec.Start {
			continue // the pid is another process's now: the group is long gone
		}
		_ = syscall.Kill(-rec.PGID, syscall.SIGKILL)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := reapDir(ctx, dir, func(o int, s uint64, m string) bool { return o == owner && s == ownerStart && set[m] })
		if err != nil {
			fmt.Fprintln(os.Stderr, "cairn exec watchdog:", err)
		} else if n > 0 {
			fmt.Fprintf(os.Stderr, "cairn exec watchdog: killed %d processes of %d handler runs at their lease deadline (the daemon renewed nothing in time)\n", n, len(markers))
		}
	}()
}

var watchdogServed atomic.Bool

// WatchdogServed reports whether this program's main called WatchdogMain, so
// that its own executable (os.Executable) can be ExecHandler.Watchdog.
func WatchdogServed() bool { return watchdogServed.Load() }
