package web_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/cairn-s3/cairn/intake/web"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/internal/testing/testenv/testledger"
	"github.com/cairn-s3/cairn/ledger"
)

// TestOddKeysShowEscapedInChromium: keys and errors that would not show as
// themselves (a bidi override, a control character, a zero-width space, NFC
// and NFD spellings of one name, a trailing space) are shown escaped in the
// browser, and keys that look alike on screen read differently.
func TestOddKeysShowEscapedInChromium(t *testing.T) {
	bin := testenv.Chromium(t)
	l := testledger.New(t, &ledger.Options{MaxAttempts: 1})
	keys := []string{"DEAD\u202eRTL.jpg", "bell\a.jpg", "zero\u200bwidth.jpg", "caf\u00e9.jpg", "cafe\u0301.jpg", "trail.jpg ", "trail.jpg", "plain  two spaces.jpg"}
	deadWith(t, l, "photos", keys, func(k string) string { return "failed on " + k + " \u202eevil" })
	srv := httptest.NewServer(web.Handler(l, nil))
	defer srv.Close()
	ctx := browser(t, bin)
	var shown []string
	var errText string
	var shot []byte
	err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#dead`, chromedp.ByID),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("#dead td.key")).map(e => e.innerText)`, &shown),
		chromedp.Text(`#dead td.err`, &errText, chromedp.ByQuery),
		chromedp.FullScreenshot(&shot, 100),
	)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	path := filepath.Join(testenv.ArtifactDir(t), "status-odd-keys.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	want := map[string]bool{
		`"DEAD\u202eRTL.jpg"`: true, `"bell\a.jpg"`: true, `"zero\u200bwidth.jpg"`: true, "caf\u00e9.jpg": true,
		`"cafe\u0301.jpg"`: true, `"trail.jpg "`: true, "trail.jpg": true, "plain  two spaces.jpg": true,
	}
	seen := map[string]bool{}
	for _, s := range shown {
		if !want[s] || seen[s] {
			t.Errorf("a key shows as %q (all shown: %q)", s, shown)
		}
		seen[s] = true
		if strings.ContainsAny(s, "\u202e\u200b\a") {
			t.Errorf("a key shows its invisible characters raw: %q", s)
		}
	}
	if len(seen) != len(keys) || strings.Contains(errText, "\u202e") || !strings.Contains(errText, `\u202e`) {
		t.Fatalf("keys shown %q, an error shown %q", shown, errText)
	}
}
