//go:build unix

package lambdatest

import "syscall"

// groupKiller returns a function that SIGKILLs the process groups pids lead
// or belong to now (never this process's own group).
func groupKiller(pids []int) func() {
	groups := map[int]bool{}
	for _, pid := range pids {
		if pg, err := syscall.Getpgid(pid); err == nil && pg > 1 && pg != syscall.Getpgrp() {
			groups[pg] = true
		}
	}
	return func() {
		for pg := range groups {
			_ = syscall.Kill(-pg, syscall.SIGKILL)
		}
	}
}
