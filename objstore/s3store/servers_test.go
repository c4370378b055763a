package s3store_test

import (
	"context"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
	"github.com/cairn-s3/cairn/objstore/s3store"
)

// What each pinned server enforces, measured here with `cairn probe` and
// recorded: the conformance suite's probe test fails if a server's behaviour
// changes, and every other test takes its expectations from the probe.
var (
	// versitygw v1.8.0, posix backend: everything but CopyObject destination
	// conditions.
	versitygwCaps = objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true, DeleteIfMatch: true,
		MultipartIfAbsent: true, MultipartIfMatch: true}
	// gofakes3 v1.2.0, memory backend: conditions on PutObject only.
	gofakes3Caps = objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true}
	// SeaweedFS 4.53 (weed mini): every condition, atomically under races.
	seaweedfsCaps = objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true, DeleteIfMatch: true,
		CopyIfAbsent: true, CopyIfMatch: true, MultipartIfAbsent: true, MultipartIfMatch: true}
	// Ceph RGW 16.2.15 (Pacific): conditions on PutObject only, If-Match
	// only with the ETag unquoted (racing losers are answered 500).
	cephCaps = objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true, IfMatchUnquoted: true}
	// A server that accepts conditional headers and ignores them all.
	ignoringCaps = objstore.Capabilities{}
)

func TestConformanceVersityGW(t *testing.T) {
	ep := testenv.S3Server(t, "versitygw")
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b, url := testenv.NewBucket(t, ep)
		return objstoretest.Instance{Store: objstore.New(b, nil), URL: url, Env: ep.Env(), Declared: &versitygwCaps,
			Uploads: uploads(t, b), MangledListings: "versitygw 1.8 ignores encoding-type=url and writes U+FFFD"}
	}})
}

func TestConformanceSeaweedFS(t *testing.T) {
	ep := testenv.S3Server(t, "seaweedfs")
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b, url := testenv.NewBucket(t, ep)
		return objstoretest.Instance{Store: objstore.New(b, nil), URL: url, Env: ep.Env(), Declared: &seaweedfsCaps,
			Uploads: uploads(t, b)}
	}})
}

func TestConformanceCeph(t *testing.T) {
	ep := testenv.S3Server(t, "ceph")
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b, url := testenv.NewBucket(t, ep)
		return objstoretest.Instance{Store: objstore.New(b, nil), URL: url, Env: ep.Env(), Declared: &cephCaps,
			Uploads: uploads(t, b), RawTokens: "Ceph RGW 16.2 writes the continuation token (a key) raw into its XML"}
	}})
}

func TestConformanceGofakes3(t *testing.T) {
	ep := testenv.S3Server(t, "gofakes3")
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b, url := testenv.NewBucket(t, ep)
		return objstoretest.Instance{Store: objstore.New(b, nil), URL: url, Env: ep.Env(), Declared: &gofakes3Caps,
			Uploads: uploads(t, b), MangledListings: "gofakes3 1.2 ignores encoding-type=url and writes U+FFFD"}
	}})
}

// TestConformanceIgnoringServer: gofakes3 behind a proxy that strips every
// conditional header, as a server that accepts them and ignores them all
// (rclone serve s3's gofakes3 fork, several emulators). The probe must say
// so, and every conditional operation must be refused with ErrNotSupported,
// never silently done unconditionally.
func TestConformanceIgnoringServer(t *testing.T) {
	ep := testenv.S3Server(t, "gofakes3")
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		_, url := testenv.NewBucket(t, ep) // created directly, then reached through the proxy
		bucket := bucketOf(t, url)
		p, b := testenv.ThroughFaultProxy(t, ep, bucket)
		p.SetOptions(faultproxy.Options{StripConditions: true})
		return objstoretest.Instance{Store: objstore.New(b, nil), Declared: &ignoringCaps, Uploads: uploads(t, b),
			MangledListings: "gofakes3 1.2 ignores encoding-type=url and writes U+FFFD"}
	}})
}

func uploads(t *testing.T, b *s3store.Backend) func() int {
	return func() int {
		n, err := b.Uploads(context.Background())
		if err != nil {
			t.Errorf("listing multipart uploads: %v", err)
		}
		return n
	}
}

func bucketOf(t *testing.T, url string) string {
	u, err := objstore.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
