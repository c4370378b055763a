package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-s3/cairn/ledger"
)

// How an exec handler is kept from outliving its daemon and its lease (the
// package doc's "Exec handlers and the daemon's death" says what is
// guaranteed):
//
// An exec handler does not outlive the daemon that started it, nor its own
// claim's lease, so neither a restarted daemon nor another instance ever runs
// a key beside its previous holder's handler. An ExecHandler's command runs in
// a process group of its own, led by a shell that kills the group when the
// daemon dies (however it dies: it waits for EOF on a pipe only the daemon
// holds), and
//
//   - when the command exits, whatever it left in its group (backgrounded
//     work, grandchildren) is killed before Handle returns;
//   - on Linux, with ExecHandler.StateDir set, every run is recorded there
//     (process group, the leader's start time, the boot id, and a
//     CAIRN_HANDLER_RUN marker in the environment its descendants inherit)
//     before it starts, and ExecHandler.Reap, called before the first claim,
//     kills and waits out every run recorded by a process that is gone (a
//     daemon killed with kill -9): the next claim of a key cannot start beside
//     its previous holder's orphan. The start time keeps a reused pid from
//     being mistaken for an orphan; runs of live processes sharing the
//     directory are left alone;
//   - with ExecHandler.Watchdog set (cairn serve sets it), a watchdog process
//     holds each run's lease deadline (the daemon sends it before the command
//     starts and after each renewal) and kills the run when it passes, even
//     while the daemon is stopped; and it kills the runs the moment the
//     daemon exits, however it exits, without waiting for a restart (that matters when another machine may claim the
//     work once the lease expires); the command itself also gets SIGKILL on
//     the daemon's death (Linux's parent-death signal, sent when the forking
//     thread exits: the fork happens on a locked thread, but a goroutine
//     that exits while locked to a thread that forked a handler earlier would
//     kill that handler, which is then retried).
//
// Limits: a process that leaves the handler's process group (setsid,
// setpgid) and clears CAIRN_HANDLER_RUN from its environment escapes all of
// this (run such handlers under systemd or in a cgroup, which kill whole
// trees); a process stuck in the kernel (D state) cannot be killed until it
// returns, and Reap fails rather than claim beside it. If the daemon and its
// watchdog and the group's leader are all killed and the daemon does not come
// back, orphans run to their end, and another machine may claim their work
// once the lease expires. On systems other than Linux there is no /proc to
// record and find processes by, and no watchdog: the process group is killed
// on cancellation (the lease's deadline included), by its leader when the
// daemon dies, and when the command exits; a stopped daemon's handlers run on
// until it resumes. The watchdog is a process like the others: what freezes
// the whole machine or cairn's cgroup (a paused VM, a cgroup freezer) stops it
// too; its deadlines are on CLOCK_BOOTTIME, so once thawed (or resumed from a
// suspend) it kills every run whose deadline passed at once, but not before.

// ExitRetry is the exit status with which an exec handler asks for a retry
// later (EX_TEMPFAIL from sysexits.h).
const ExitRetry = 75

// ExecHandler runs a command per claim. The command gets the environment
// CAIRN_BUCKET, CAIRN_KEY, CAIRN_VERSION_ID, CAIRN_ETAG, CAIRN_SIZE,
// CAIRN_SEQUENCER, CAIRN_EVENT (created or removed), CAIRN_EVENT_NAME,
// CAIRN_FENCING_TOKEN and CAIRN_ATTEMPT on top of cairn's own, and the Payload
// as JSON on stdin. Exit 0: processed (the first 4 KiB of stdout are the
// result). Exit 75: retry later. Any other exit: a permanent failure (dead
// letter; replayable). Killed by a signal or by the timeout: retried. On
// timeout or cancellation the whole process group is killed.
//
// An audit's resubmission has an empty CAIRN_SEQUENCER and a CAIRN_EVENT_NAME
// beginning "cairn:Audit:" (event.AuditPrefix): S3 never numbered that change,
// so a handler must not deduplicate it by (key, sequencer).
//
// Whatever the command leaves running in its process group when it exits
// (backgrounded work) is killed too: when Handle returns, nothing of the run
// is left. On Linux a handler does not outlive the process that started it
// (see "Exec handlers and the daemon's death" in the package doc): set
// StateDir (and Watchdog in a program whose main calls WatchdogMain), call
// Reap before claiming work, and Close at the end.
type ExecHandler struct {
	// Argv is the command and its arguments (no shell).
	Argv []string
	// Dir is the working directory ("" = cairn's).
	Dir string
	// Env is added to the environment.
	Env []string
	// StateDir (Linux) is where running handlers are recorded (process group,
	// start time, a CAIRN_HANDLER_RUN marker in their environment), so that
	// Reap, in the next process using the directory, kills what a process that
	// died (even by kill -9) left running. One directory per machine serves any
	// number of processes; "" records nothing.
	StateDir string
	// Watchdog (Linux, with StateDir) is an executable whose main calls
	// WatchdogMain first (os.Executable() in cairn). One is started per
	// ExecHandler; when this process exits, however it exits, it kills this
	// process's running handlers at once, without waiting for a restart.
	Watchdog string

	mu       sync.Mutex
	prepared bool // reaped and watchdog started
	reaped   int
	watchdog *watchdog
	leaders  *groupEOF
}

// Shell returns an ExecHandler that runs command with /bin/sh -c, so the
// command line may use the shell's quoting, variables and pipes.
func Shell(command string) *ExecHandler {
	return &ExecHandler{Argv: []string{"/bin/sh", "-c", command}}
}

// Reap kills, and waits until they are gone, the handler processes recorded
// in StateDir by processes that are no longer running (a daemon killed with
// kill -9 and, if its watchdog died too, what the watchdog would have
// killed), and starts the Watchdog. It returns how many processes it killed.
// Handle calls it before its first command if it was not called; call it
// before claiming work, so that no claim starts beside the previous holder's
// orphan. It fails, and so does Handle (a retry), if an orphan cannot be
// killed before ctx is done or the watchdog cannot start.
func (h *ExecHandler) Reap(ctx context.Context) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prepared {
		return h.reaped, nil
	}
	n, err := reapDead(ctx, h.StateDir)
	if err != nil {
		return n, err
	}
	h.reaped += n
	if h.leaders == nil {
		if h.leaders, err = newGroupEOF(); err != nil {
			return h.reaped, err
		}
	}
	if h.watchdog, err = startWatchdog(h.Watchdog, h.StateDir); err != nil {
		return h.reaped, err
	}
	h.prepared = true
	return h.reaped, nil
}

// Close stops the watchdog, which first kills any handler still running.
// Call it once no Handle runs.
func (h *ExecHandler) Close() error {
	h.mu.Lock()
	wd := h.watchdog
	h.watchdog = nil
	leaders := h.leaders
	h.leaders = nil
	h.mu.Unlock()
	leaders.close()
	return wd.close()
}

// Handle runs the command for w.
func (h *ExecHandler) Handle(ctx context.Context, w Work) (string, error) {
	if len(h.Argv) == 0 {
		return "", Permanent(errors.New("intake: exec handler without a command"))
	}
	if _, err := h.Reap(ctx); err != nil {
		return "", err
	}
	in, err := json.Marshal(w.Payload())
	if err != nil {
		return "", Permanent(err)
	}
	cmd := exec.CommandContext(ctx, h.Argv[0], h.Argv[1:]...)
	cmd.Dir = h.Dir
	ev := w.Event
	cmd.Env = append(os.Environ(), h.Env...)
	cmd.Env = append(cmd.Env,
		"CAIRN_BUCKET="+ev.Bucket, "CAIRN_KEY="+ev.Key, "CAIRN_VERSION_ID="+ev.VersionID, "CAIRN_ETAG="+ev.ETag,
		"CAIRN_SIZE="+strconv.FormatInt(ev.Size, 10), "CAIRN_SEQUENCER="+ev.Sequencer, "CAIRN_EVENT="+string(ev.Kind),
		"CAIRN_EVENT_NAME="+ev.Name, "CAIRN_FENCING_TOKEN="+strconv.FormatInt(w.Token, 10), "CAIRN_ATTEMPT="+strconv.Itoa(w.Attempt))
	cmd.Stdin = bytes.NewReader(in)
	// Only what the ledger keeps of a result or failure cause is captured.
	stdout := &capped{n: ledger.MaxText}
	stderr := &capped{n: ledger.MaxText}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	run, marker, err := track(h.StateDir)
	if err != nil {
		return "", err
	}
	cmd.Env = append(cmd.Env, marker...)
	g, err := h.guard(ctx, run)
	if err != nil {
		run.finish(0, false)
		return "", fmt.Errorf("%w: %v", errUnguarded, err)
	}
	defer g.stop() // after finish: nothing of the run is left
	h.mu.Lock()
	leaders := h.leaders
	h.mu.Unlock()
	leader, err := leaders.startLeader(cmd.Env)
	if err != nil {
		run.finish(0, false)
		return "", err
	}
	pgid := 0
	if leader != nil {
		pgid = leader.Process.Pid
		run.started(pgid)                    // the group exists from here: record it at once
		defer func() { _ = leader.Wait() }() // killed with its group by finish
	}
	processGroup(cmd, pgid)
	cmd.WaitDelay = 5 * time.Second
	if v := validityOf(ctx); v != nil && enforceLeaseDeadline && !time.Now().Before(v.Until()) {
		err = errLeaseExpired // the claim ran out while the run was prepared: never start it
	} else if err = startTied(cmd); err == nil {
		if pgid == 0 {
			pgid = cmd.Process.Pid
			run.started(pgid)
		}
		err = cmd.Wait()
	}
	// Killed at or after the last deadline the watchdog holds: the watchdog
	// killed it (or could have), whether or not this process's timer has
	// fired yet. That is a lost lease, not a failed attempt.
	atDeadline := killedOutright(err) && g.passed()
	// A run stopped from outside (cancelled, expired) may have left processes
	// outside its group (setsid, a double fork) that still carry its marker:
	// find and kill them before the run's record goes.
	run.finish(pgid, ctx.Err() != nil || atDeadline || errors.Is(err, errLeaseExpired))
	if err == nil {
		return stdout.String(), nil
	}
	tail := strings.TrimSpace(stderr.String())
	if tail != "" {
		tail = ": " + tail
	}
	if atDeadline || errors.Is(err, errLeaseExpired) {
		return "", fmt.Errorf("handler %s stopped at its claim's deadline%s: %w", h.Argv[0], tail, errLeaseExpired)
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("handler %s stopped (%w)%s", h.Argv[0], context.Cause(ctx), tail)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		switch code := exit.ExitCode(); code {
		case ExitRetry:
			return "", fmt.Errorf("handler %s asked to retry (exit %d)%s", h.Argv[0], code, tail)
		case -1:
			return "", fmt.Errorf("handler %s: %v%s", h.Argv[0], exit, tail) // a signal: retry
		default:
			return "", Permanent(fmt.Errorf("handler %s failed (exit %d)%s", h.Argv[0], code, tail))
		}
	}
	return "", fmt.Errorf("handler %s: %w", h.Argv[0], err) // could not start: retry
}

// errUnguarded: the run could not be handed to the watchdog, so it did not
// start. The work is released, not counted as an attempt: the cause is
// cairn's, not the handler's.
var errUnguarded = errors.New("intake: the handler was not started (its deadline could not be handed to the watchdog); the work is released")

// guard hands the run's lease deadline to the watchdog before the command
// starts, and every later one as renewals succeed, so that the command is
// killed at its deadline even if this process is stopped. Later deadlines
// are written by the guardian's own goroutine, newest first and each once:
// a renewal (which announces them under the validity's lock) never waits
// for the pipe. Without a watchdog (or a lease) it does nothing.
func (h *ExecHandler) guard(ctx context.Context, run *runTrack) (*guardian, error) {
	v := validityOf(ctx)
	h.mu.Lock()
	wd := h.watchdog
	h.mu.Unlock()
	marker := run.marker()
	if v == nil || wd == nil || marker == "" || !enforceLeaseDeadline {
		return nil, nil
	}
	g := &guardian{wd: wd, marker: marker, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	until, unsubscribe := v.subscribe(g.announce)
	at, err := wd.deadline(marker, until)
	if err != nil {
		unsubscribe()
		return nil, fmt.Errorf("intake: handing the handler's lease deadline to the watchdog: %w", err)
	}
	g.sent, g.unsubscribe = at, unsubscribe
	go g.write()
	return g, nil
}

// guardian is one run's writer of deadlines to the watchdog.
type guardian struct {
	wd          *watchdog
	marker      string
	unsubscribe func()
	kick        chan struct{} // a newer deadline waits in latest
	quit, done  chan struct{}

	mu     sync.Mutex
	latest time.Time // the newest deadline announced
	sent   int64     // the latest deadline the watchdog was given, on its clock
}

// announce takes a later deadline (called under the validity's lock: it
// only notes it).
func (g *guardian) announce(until time.Time) {
	g.mu.Lock()
	if until.After(g.latest) {
		g.latest = until
	}
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// write sends the newest announced deadline whenever there is one.
func (g *guardian) write() {
	defer close(g.done)
	for {
		select {
		case <-g.quit:
			return
		case <-g.kick:
		}
		g.mu.Lock()
		until := g.latest
		g.mu.Unlock()
		// A deadline that could not be written leaves the earlier one in
		// force, which only kills sooner.
		if at, err := g.wd.deadline(g.marker, until); err == nil {
			g.mu.Lock()
			g.sent = max(g.sent, at)
			g.mu.Unlock()
		}
	}
}

// passed reports whether the watchdog's deadline for the run has come.
func (g *guardian) passed() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return clockPassed(g.sent)
}

// stop ends the guard: no more deadlines, and the watchdog forgets the run.
func (g *guardian) stop() {
	if g == nil {
		return
	}
	g.unsubscribe()
	close(g.quit)
	<-g.done
	g.wd.end(g.marker)
}

// capped keeps the first n bytes written.
type capped struct {
	bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
