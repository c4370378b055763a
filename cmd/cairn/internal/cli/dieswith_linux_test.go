package cli_test

import "syscall"

// diesWithTest makes a child get SIGKILL when the test process dies.
func diesWithTest() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
