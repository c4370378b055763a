//go:build unix

package services

import "syscall"

// setDetach puts the server in a session of its own (it outlives a
// terminal's ^C and the test's process group).
func setDetach(a *syscall.SysProcAttr, on bool) { a.Setsid = on }

// runAs runs a server as uid:gid (-1: as this process).
func runAs(uid, gid int) *syscall.SysProcAttr {
	if uid < 0 {
		return &syscall.SysProcAttr{}
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
}
