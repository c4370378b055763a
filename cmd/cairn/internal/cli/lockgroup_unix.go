//go:build unix

package cli

import "syscall"

// groupAttr puts a command in process group pgid (a keeper's), or in a
// group of its own if pgid is 0.
func groupAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}

// signalGroup sends sig to every process of group pgid.
func signalGroup(pgid int, sig syscall.Signal) { _ = syscall.Kill(-pgid, sig) }
