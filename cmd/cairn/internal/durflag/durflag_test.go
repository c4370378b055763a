package durflag

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "1d12h": 36 * time.Hour, "90s": 90 * time.Second, "0": 0,
		"-2d": -48 * time.Hour, "0d": 0, "1d0.5h": 24*time.Hour + 30*time.Minute,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "30", "1.5d", "xd", "1d-1h", "d12h", "30days", "1e9d"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	d := dayDuration(30 * 24 * time.Hour)
	if d.String() != "30d" {
		t.Errorf("30 days print as %q", d.String())
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30d", "1d12h", "90s", "-2d", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse((*dayDuration)(&v).String())
		if err != nil || back != v {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, v, (*dayDuration)(&v).String(), back, err)
		}
	})
}
