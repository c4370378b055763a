package services

import "syscall"

func setParentDeath(a *syscall.SysProcAttr, on bool) {
	if on {
		a.Pdeathsig = syscall.SIGKILL
	}
}
