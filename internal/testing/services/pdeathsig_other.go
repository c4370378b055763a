//go:build !linux

package services

import "syscall"

// Only Linux can tie a child's life to its parent's; elsewhere tests stop
// servers explicitly.
func setParentDeath(*syscall.SysProcAttr, bool) {}
