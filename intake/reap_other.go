//go:build !linux

package intake

import (
	"context"
	"os/exec"
	"time"
)

// Without /proc there is nothing to record runs by or reap them with: on
// other systems handlers are tied to the daemon only by their process group
// (killed on cancellation and when the leader exits), see the package doc.

type runTrack struct{}

func track(string) (*runTrack, []string, error) { return nil, nil, nil }

func (*runTrack) started(int) {}

func (*runTrack) marker() string { return "" }

func (*runTrack) finish(pgid int, _ bool) { killGroup(pgid) }

func reapDead(context.Context, string) (int, error) { return 0, nil }

func startTied(cmd *exec.Cmd) error { return cmd.Start() }

type watchdog struct{}

func startWatchdog(string, string) (*watchdog, error) { return nil, nil }

func (*watchdog) close() error { return nil }

func (*watchdog) deadline(string, time.Time) (int64, error) { return 0, nil }

func clockPassed(int64) bool { return false }

func (*watchdog) end(string) {}

// WatchdogMain serves the exec handler watchdog on Linux; elsewhere there is
// none and it returns at once.
func WatchdogMain() {}

// WatchdogServed reports false: there is no watchdog on this system.
func WatchdogServed() bool { return false }
