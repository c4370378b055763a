//go:build !unix

package fsstore

import (
	"errors"
	"os"
)

var errNoFlock = errors.New("the fs store needs flock(2) for cross-process atomicity; it runs on Unix only")

func flock(*os.File) error                  { return errNoFlock }
func flockShared(*os.File) error            { return errNoFlock }
func flockTry(*os.File, bool) (bool, error) { return false, errNoFlock }
func funlock(*os.File) error                { return nil }
func inode(os.FileInfo) uint64              { return 0 }
