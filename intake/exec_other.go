//go:build !unix

package intake

import "os/exec"

// processGroup: without process groups, only the command itself is killed.
func processGroup(*exec.Cmd, int) {}

// killedOutright: without signals there is no telling.
func killedOutright(error) bool { return false }

// killGroup: without process groups there is nothing to kill.
func killGroup(int) bool { return false }

// groupEOF: without process groups there is no group leader.
type groupEOF struct{}

func newGroupEOF() (*groupEOF, error) { return nil, nil }

func (*groupEOF) startLeader([]string) (*exec.Cmd, error) { return nil, nil }

func (*groupEOF) close() {}
