package cli

import "syscall"

// withParentDeath makes the child get SIGTERM if cairn dies (even by kill -9):
// a command must not outlive the process renewing its lock.
func withParentDeath(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
