// Package durflag is the duration flag of cairn's command line: Go durations
// plus whole days ("30d", "1d12h"), which retention and horizon settings are
// naturally written in and time.ParseDuration does not take. Written here
// because pflag's duration is time.ParseDuration and no well-kept library adds
// just days.
package durflag

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Var defines a duration flag that also takes days ("30d", "1d12h"),
// which Go's time.ParseDuration does not, and prints whole days as days.
func Var(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var((*dayDuration)(p), name, usage)
}

type dayDuration time.Duration

func (d *dayDuration) Type() string { return "duration" }

func (d *dayDuration) String() string {
	v := time.Duration(*d)
	if v >= 24*time.Hour && v%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(v/(24*time.Hour)), 10) + "d"
	}
	return v.String()
}

func (d *dayDuration) Set(s string) error {
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*d = dayDuration(v)
	return nil
}

// Parse is time.ParseDuration with a leading whole number of days
// allowed: "30d", "1d12h", "-2d".
func Parse(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a duration: use e.g. 90s, 15m, 36h, 30d or 1d12h", s)
	rest, neg := strings.CutPrefix(s, "-")
	var days int64
	i := strings.IndexByte(rest, 'd')
	if i >= 0 {
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil || n < 0 || n > 100*365 {
			return 0, bad
		}
		days, rest = n, rest[i+1:]
	}
	var v time.Duration
	if rest != "" {
		var err error
		if v, err = time.ParseDuration(rest); err != nil || v < 0 {
			return 0, bad
		}
	} else if i < 0 && s != "0" {
		return 0, bad
	}
	v += time.Duration(days) * 24 * time.Hour
	if neg {
		v = -v
	}
	return v, nil
}
