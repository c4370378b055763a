//go:build !linux

package cli

import "syscall"

// withParentDeath: only Linux can tie a child's life to its parent's.
func withParentDeath(*syscall.SysProcAttr) {}
