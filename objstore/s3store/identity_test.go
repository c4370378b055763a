package s3store

import (
	"net/http"
	"testing"
)

// What identifies a server: its Server header, or else the names of its
// vendor headers (Ceph RGW and s3rver send no Server header); nothing, if it
// sends neither.
func TestServerIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header http.Header
		want   string
	}{
		{"named", http.Header{"Server": {"MinIO"}, "X-Amz-Request-Id": {"1"}}, "MinIO"},
		{"unnamed, vendor headers", http.Header{"X-Rgw-Bytes-Used": {"0"}, "X-Amz-Request-Id": {"tx1"}, "X-Content-Type-Options": {"nosniff"}},
			"(no Server header; sends x-amz-request-id x-rgw-bytes-used)"},
		{"only generic headers", http.Header{"X-Content-Type-Options": {"nosniff"}, "Content-Length": {"0"}}, ""},
		{"nothing", http.Header{}, ""},
	} {
		if got := serverIdentity(tc.header); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
