package audit

import (
	"compress/gzip"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-s3/cairn/objstore"
)

// ErrInventory: an S3 Inventory manifest or file cannot be used.
var ErrInventory = errors.New("audit: unusable S3 Inventory")

type manifest struct {
	SourceBucket string `json:"sourceBucket"`
	FileFormat   string `json:"fileFormat"`
	FileSchema   string `json:"fileSchema"`
	Files        []struct {
		Key string `json:"key"`
	} `json:"files"`
}

// Inventory reads an S3 Inventory report (CSV format) for buckets too big to
// LIST: manifestKey is the report's manifest.json in store (the inventory's
// destination bucket), whose data files are read from the same store. It
// yields the latest version of every object (delete markers and older
// versions are skipped), one row at a time, and the source bucket's name.
// Rows need the Key, Size, LastModifiedDate and ETag fields.
func Inventory(ctx context.Context, store *objstore.Store, manifestKey string) (string, iter.Seq2[objstore.Info, error], error) {
	data, _, err := store.GetBytes(ctx, manifestKey)
	if err != nil {
		return "", nil, fmt.Errorf("%w: reading %s: %v", ErrInventory, manifestKey, err)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return "", nil, fmt.Errorf("%w: %s is not a manifest: %v", ErrInventory, manifestKey, err)
	}
	if !strings.EqualFold(m.FileFormat, "CSV") {
		return "", nil, fmt.Errorf("%w: file format %q (only CSV is read)", ErrInventory, m.FileFormat)
	}
	col := map[string]int{}
	for i, f := range strings.Split(m.FileSchema, ",") {
		col[strings.TrimSpace(f)] = i
	}
	for _, need := range []string{"Key", "Size", "LastModifiedDate", "ETag"} {
		if _, ok := col[need]; !ok {
			return "", nil, fmt.Errorf("%w: the report lacks the %s field (schema %q)", ErrInventory, need, m.FileSchema)
		}
	}
	seq := func(yield func(objstore.Info, error) bool) {
		for _, f := range m.Files {
			ok, err := readInventoryFile(ctx, store, f.Key, col, yield)
			if err != nil {
				yield(objstore.Info{}, err)
				return
			}
			if !ok {
				return
			}
		}
	}
	return m.SourceBucket, seq, nil
}

func readInventoryFile(ctx context.Context, store *objstore.Store, key string, col map[string]int, yield func(objstore.Info, error) bool) (bool, error) {
	rc, _, err := store.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("%w: %s: %v", ErrInventory, key, err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if strings.HasSuffix(key, ".gz") {
		zr, err := gzip.NewReader(rc)
		if err != nil {
			return false, fmt.Errorf("%w: %s: %v", ErrInventory, key, err)
		}
		defer zr.Close()
		r = zr
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	field := func(rec []string, name string) string {
		if i, ok := col[name]; ok && i < len(rec) {
			return rec[i]
		}
		return ""
	}
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("%w: %s line %d: %v", ErrInventory, key, line, err)
		}
		if field(rec, "IsDeleteMarker") == "true" || field(rec, "IsLatest") == "false" {
			continue
		}
		k, err := url.QueryUnescape(field(rec, "Key"))
		if err != nil || k == "" {
			return false, fmt.Errorf("%w: %s line %d: bad key %q", ErrInventory, key, line, field(rec, "Key"))
		}
		size, err := strconv.ParseInt(field(rec, "Size"), 10, 64)
		if err != nil {
			return false, fmt.Errorf("%w: %s line %d: bad size %q", ErrInventory, key, line, field(rec, "Size"))
		}
		mod, err := time.Parse(time.RFC3339Nano, field(rec, "LastModifiedDate"))
		if err != nil {
			return false, fmt.Errorf("%w: %s line %d: bad date %q", ErrInventory, key, line, field(rec, "LastModifiedDate"))
		}
		info := objstore.Info{Key: k, Size: size, LastModified: mod, ETag: objstore.NormalizeETag(field(rec, "ETag")), VersionID: field(rec, "VersionId")}
		if !yield(info, nil) {
			return false, nil
		}
	}
}
