//go:build !unix

package services

import "syscall"

// setDetach: without sessions a server is not detached.
func setDetach(*syscall.SysProcAttr, bool) {}

// runAs: without Unix credentials a server runs as this process.
func runAs(int, int) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
