package faultproxy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/faultproxy"
)

// Each fault as the client and the server see it.
func TestFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		opts       faultproxy.Options
		wantErr    bool
		wantServer int32 // requests the server got, after Wait
	}{
		{"none", faultproxy.Options{}, false, 1},
		{"lost-request", faultproxy.Options{LostRequestRate: 1}, true, 0},
		{"lost-response", faultproxy.Options{LostResponseRate: 1}, true, 1},
		{"late", faultproxy.Options{LateRate: 1, LateDelay: 50 * time.Millisecond}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
			defer srv.Close()
			p, err := faultproxy.New(srv.URL, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			req, _ := http.NewRequest(http.MethodPut, p.URL+"/k", strings.NewReader("body"))
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("client error %v, want error %v", err, tc.wantErr)
			}
			if tc.name == "late" && got.Load() != 0 {
				t.Fatalf("the late request reached the server before the client saw its error")
			}
			p.Wait()
			if n := got.Load(); n != tc.wantServer {
				t.Fatalf("server got %d requests, want %d", n, tc.wantServer)
			}
		})
	}
}
