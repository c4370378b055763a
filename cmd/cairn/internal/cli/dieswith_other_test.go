//go:build !linux

package cli_test

import "syscall"

// diesWithTest: only Linux has a parent-death signal; elsewhere a child the
// test started outlives a test process that dies.
func diesWithTest() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
