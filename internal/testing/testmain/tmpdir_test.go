package testmain

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A run directory whose owner is gone (a test binary killed, its PID maybe
// reused since) is swept; one whose owner runs is left alone.
func TestSweepRemovesOnlyTheDirectoriesOfGoneBinaries(t *testing.T) {
	base := t.TempDir()
	self, ok := procStart(os.Getpid())
	if !ok {
		t.Skip("no /proc: run directories are not used")
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	gone, ok := procStart(child.Process.Pid)
	if !ok {
		t.Fatal("no start time for a running child")
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	dirs := map[string]bool{ // name -> swept
		fmt.Sprintf("%s%d-%s-1", runDirPrefix, child.Process.Pid, gone): true,  // killed
		fmt.Sprintf("%s%d-%s0-2", runDirPrefix, os.Getpid(), self):      true,  // this PID, another process
		fmt.Sprintf("%s%d-%s-3", runDirPrefix, os.Getpid(), self):       false, // this process
		"cairn-other-1": false,
	}
	for name := range dirs {
		if err := os.MkdirAll(filepath.Join(base, name, "001"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sweep(base)
	for name, swept := range dirs {
		_, err := os.Stat(filepath.Join(base, name))
		if gone := os.IsNotExist(err); gone != swept {
			t.Errorf("%s: removed %v, want %v", name, gone, swept)
		}
	}
}

// privateTempDir points TMPDIR at a run directory of this process, and its
// remover removes it and restores TMPDIR.
func TestPrivateTempDir(t *testing.T) {
	before := os.TempDir()
	remove := privateTempDir()
	dir := os.TempDir()
	if _, ok := procStart(os.Getpid()); ok && (filepath.Dir(dir) != before || filepath.Base(dir)[:len(runDirPrefix)] != runDirPrefix) {
		t.Errorf("TMPDIR %s, want a run directory in %s", dir, before)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	remove()
	if os.TempDir() != before {
		t.Errorf("TMPDIR %s after, want %s back", os.TempDir(), before)
	}
	if _, err := os.Stat(dir); dir != before && !os.IsNotExist(err) {
		t.Errorf("%s not removed: %v", dir, err)
	}
}
