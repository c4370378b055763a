//go:build !unix

package cli

import (
	"os"
	"syscall"
)

// groupAttr: without process groups the command runs alone.
func groupAttr(int) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// signalGroup: without process groups only the command itself can be
// stopped (killed: there is no other signal to send it), not its children.
func signalGroup(pid int, _ syscall.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
