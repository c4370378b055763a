//go:build unix

package fsstore

import (
	"errors"
	"os"
	"syscall"
)

func flock(f *os.File) error { return flockHow(f, syscall.LOCK_EX) }

// flockShared takes a shared lock, waiting for an exclusive holder.
func flockShared(f *os.File) error { return flockHow(f, syscall.LOCK_SH) }

// flockTry takes an exclusive (or shared) lock only if no one holds a
// conflicting one; it reports whether it did.
func flockTry(f *os.File, shared bool) (bool, error) {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	err := flockHow(f, how|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

func flockHow(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

func funlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
