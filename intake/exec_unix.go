//go:build unix

package intake

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// processGroup makes cmd join process group pgid (its leader, see
// startLeader), or lead its own if pgid is 0, and, on cancellation, kills the
// whole group, so a handler's children die with it.
func processGroup(cmd *exec.Cmd, pgid int) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	cmd.Cancel = func() error {
		g := pgid
		if g == 0 {
			g = cmd.Process.Pid
		}
		return syscall.Kill(-g, syscall.SIGKILL)
	}
}

// killedOutright reports whether err is a command's death by SIGKILL (what
// the watchdog and a group kill send).
func killedOutright(err error) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// killGroup kills what is left of the process group pgid once its leader has
// exited (backgrounded work, grandchildren) and reports whether anything was.
func killGroup(pgid int) bool {
	return pgid > 0 && syscall.Kill(-pgid, syscall.SIGKILL) == nil
}

// leaderScript is the group leader's: it waits for EOF on fd 3 (the read
// end of a pipe whose only write end is held by the process that runs the
// handlers) and then kills its whole process group, itself included.
const leaderScript = `while read -r _ <&3; do :; done; kill -9 0`

// leaderName is the group leader's argv[0]: it names no cairn, so that
// pkill cairn (or pkill -f cairn) leaves it to do its work.
const leaderName = "handler-group-leader"

// groupEOF is the pipe of the group leaders: the write end stays open in
// this process for as long as it lives, and every leader holds the read end.
type groupEOF struct {
	r, w *os.File
}

func newGroupEOF() (*groupEOF, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("intake: the handlers' group pipe: %w", err)
	}
	return &groupEOF{r: r, w: w}, nil
}

// startLeader starts the leader of a new handler's process group: a shell
// that kills the group the moment this process dies, however it dies (the
// kernel closes the pipe's write end), and even if the watchdog dies with it
// (pkill -9 cairn): Linux's parent-death signal reaches only a handler's
// first process, and a shell that forks its command leaves the command to
// run on. The leader carries env (the run's marker).
func (g *groupEOF) startLeader(env []string) (*exec.Cmd, error) {
	if g == nil {
		return nil, nil
	}
	c := &exec.Cmd{Path: "/bin/sh", Args: []string{leaderName, "-c", leaderScript}, Env: env,
		ExtraFiles: []*os.File{g.r}, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("intake: starting the handler's process group leader: %w", err)
	}
	return c, nil
}

func (g *groupEOF) close() {
	if g != nil {
		g.w.Close()
		g.r.Close()
	}
}
