//go:build unix

package intake

import (
	"os/exec"
	"syscall"
)

// processGroup starts cmd in its own process group and, on cancellation,
// kills the whole group, so a handler's children die with it.
func processGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// killGroup kills what is left of the process group pgid once its leader has
// exited (backgrounded work, grandchildren) and reports whether anything was.
func killGroup(pgid int) bool {
	return pgid > 0 && syscall.Kill(-pgid, syscall.SIGKILL) == nil
}
