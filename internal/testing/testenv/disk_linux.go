package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// SmallDisk mounts a tmpfs of size bytes on a new directory and returns it:
// a real file system that fills up (ENOSPC), for full-disk tests. It is
// unmounted when the test ends. Mounting needs root (CAP_SYS_ADMIN): without
// it the test is skipped, saying so; objstore/faulty's Full fault injects the
// same error in process everywhere.
func SmallDisk(t testing.TB, size int64) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cairn-disk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+strconv.FormatInt(size, 10)); err != nil {
		os.Remove(dir)
		t.Skipf("a full-disk test needs a small tmpfs, and mounting one needs root (CAP_SYS_ADMIN): %v; the faulty.Full injector tests the same error in process", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting the test's tmpfs at %s: %v", dir, err)
			return
		}
		os.Remove(dir)
	})
	return dir
}

// FillDisk writes a file in dir until its file system is full and returns a
// function that removes it (frees the space).
func FillDisk(t testing.TB, dir string) (free func()) {
	t.Helper()
	name := filepath.Join(dir, "cairn-test-fill")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err = f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
	// Small writes may still fit in a partly used page: take those too.
	for _, n := range []int{512, 64, 1} {
		if f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			for {
				if _, err := f.Write(buf[:n]); err != nil {
					break
				}
			}
			f.Close()
		}
	}
	return func() { _ = os.Remove(name) }
}
