//go:build !linux

package testenv

import "testing"

// SmallDisk skips the test: a small tmpfs is mounted on Linux only (as root).
// objstore/faulty's Full fault injects the same error in process.
func SmallDisk(t testing.TB, size int64) string {
	t.Helper()
	t.Skip("a full-disk test mounts a small tmpfs, which this test helper does on Linux only; the faulty.Full injector tests the same error in process")
	return ""
}

// FillDisk is not reached: SmallDisk skips.
func FillDisk(t testing.TB, dir string) (free func()) { return func() {} }
