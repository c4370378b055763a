//go:build !unix

package intake

import "os/exec"

// processGroup: without process groups, only the command itself is killed.
func processGroup(*exec.Cmd) {}

// killGroup: without process groups there is nothing to kill.
func killGroup(int) bool { return false }
