package objstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key in bytes (S3's limit).
const MaxKeyLen = 1024

// ValidateKey checks key against the portable key rules in the package doc and
// returns an error wrapping ErrInvalidKey that says what is wrong.
func ValidateKey(key string) error {
	if err := validateKey(key, false); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidKey, err)
	}
	return nil
}

// ValidatePrefix checks a listing prefix: like a key, but it may be empty and may
// end with "/".
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := validateKey(prefix, true); err != nil {
		return fmt.Errorf("%w: prefix: %s", ErrInvalidKey, err)
	}
	return nil
}

func validateKey(key string, prefix bool) error {
	switch {
	case key == "":
		return fmt.Errorf("the key is empty")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("the key is %d bytes long; the limit is %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("the key is not valid UTF-8")
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("the key starts with \"/\"; drop the leading slash")
	}
	if i := strings.IndexByte(key, 0); i >= 0 {
		return fmt.Errorf("the key has NUL at byte %d: S3's XML listings, MinIO, PostgreSQL text and a process environment cannot carry it; drop or replace it", i)
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		last := i == len(segs)-1
		switch {
		case s == "" && last && !prefix:
			return fmt.Errorf("the key ends with \"/\" (a folder marker); name an object")
		case s == "" && !last:
			return fmt.Errorf("the key has an empty segment (\"//\")")
		case s == "." || s == "..":
			return fmt.Errorf("the key has a %q segment, which S3-compatible servers and filesystems treat differently", s)
		}
	}
	return nil
}

// ValidateMetadata checks user metadata: keys are HTTP header tokens, values are
// printable ASCII (what S3 preserves byte for byte).
func ValidateMetadata(md map[string]string) error {
	for k, v := range md {
		if k == "" {
			return fmt.Errorf("metadata key is empty")
		}
		for i := 0; i < len(k); i++ {
			c := k[i]
			if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
				return fmt.Errorf("metadata key %q: character %q is not allowed in an HTTP header name", k, c)
			}
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < ' ' || c >= 0x7f {
				return fmt.Errorf("metadata %q: value must be printable ASCII (encode other text, e.g. with url.QueryEscape)", k)
			}
		}
	}
	return nil
}
