//go:build !linux

package cli

import (
	"errors"
	"io"
	"time"
)

// Without Linux's CLOCK_MONOTONIC shared by every process there is no
// deadline keeper: a stalled holder's command runs on until the holder
// wakes and kills it.

type keeper struct{}

func startKeeper(time.Time) (*keeper, error) { return nil, nil }

func (*keeper) pgid() int { return 0 }

func (*keeper) extend(time.Time) {}

func (*keeper) end() {}

func keep(int64, io.Reader) error { return errors.New("cairn lock keep: only on Linux") }
