package testmain

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runDirPrefix names the temporary directory of one test binary:
// cairn-run-PID-START-RANDOM, START the process's start time in clock ticks
// since boot (/proc/PID/stat field 22), so that a directory is known to be
// its owner's only while that very process runs (a PID is reused).
const runDirPrefix = "cairn-run-"

// privateTempDir points TMPDIR at a directory of this test binary's own, so
// that everything it and its children create as temporary (t.TempDir, the
// servers testenv starts and their logs, browser profiles, the directories
// of the commands under test) lives under one directory, removed when the
// binary ends. A binary killed before its end (SIGKILL, a timeout, a panic)
// cannot remove it: the next binary to start removes every such directory
// whose owner is gone. It returns the function that removes this one, and
// leaves TMPDIR alone where a process's start time cannot be read.
func privateTempDir() (remove func()) {
	base := os.TempDir()
	start, ok := procStart(os.Getpid())
	if !ok {
		return func() {}
	}
	sweep(base)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-%s-", runDirPrefix, os.Getpid(), start))
	if err != nil {
		return func() {}
	}
	// Traversable by other users: the tests run PostgreSQL as its own user
	// (when run as root) with its data directory inside.
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return func() {}
	}
	if os.Getenv("CAIRN_TEST_ARTIFACTS") == "" {
		// Screenshots outlive the run.
		os.Setenv("CAIRN_TEST_ARTIFACTS", filepath.Join(base, "cairn-test-artifacts"))
	}
	old, had := os.LookupEnv("TMPDIR")
	os.Setenv("TMPDIR", dir)
	return func() {
		if had {
			os.Setenv("TMPDIR", old)
		} else {
			os.Unsetenv("TMPDIR")
		}
		// A helper process of a browser may still write for a moment.
		for i := 0; os.RemoveAll(dir) != nil && i < 50; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// sweep removes the run directories in base whose owners are gone.
func sweep(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), runDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		f := strings.SplitN(rest, "-", 3)
		if len(f) != 3 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		if start, ok := procStart(pid); ok && start == f[1] {
			continue // its owner runs
		}
		os.RemoveAll(filepath.Join(base, e.Name()))
	}
}

// procStart returns pid's start time, from /proc.
func procStart(pid int) (string, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:]) // from field 3 (state) on
	if len(f) < 20 {
		return "", false
	}
	return f[19], true // field 22
}
