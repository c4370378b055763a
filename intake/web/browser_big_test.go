package web_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-s3/cairn/intake/web"
	"github.com/cairn-s3/cairn/internal/testing/testenv"
	"github.com/cairn-s3/cairn/ledger"
)

// TestStatusPageAt200kInChromium: with 200,000 records of which 50,000 are
// dead letters, the page groups them by error, shows one group, pages
// through it, and replays exactly that group; screenshots of each step are
// kept in the test artifacts.
func TestStatusPageAt200kInChromium(t *testing.T) {
	bin := testenv.Chromium(t)
	if testing.Short() {
		t.Skip("-short: making a ledger of 200,000 records takes half a minute")
	}
	l := bigLedger(t, 200000, 50000)
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret"}))
	defer srv.Close()
	// Ten minutes, on a machine the suite shares: the group's replay is one
	// statement on SQLite (it selects by error class), but the ledger of
	// 200,000 records is made first.
	ctx := browserFor(t, bin, 10*time.Minute)
	shots := map[string]*[]byte{"status-200k.png": new([]byte), "status-200k-group.png": new([]byte), "status-200k-group-page2.png": new([]byte), "status-200k-replayed.png": new([]byte)}

	var dead, heading, heading2, firstKey, firstKey2, button, flash string
	var groups, rows, rows2 int
	class := web.ErrorClass(bigErrors[2](0))
	var replayStart time.Time
	pageStart := time.Now()
	err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#dead-groups`, chromedp.ByID),
		chromedp.Text(`#count-dead`, &dead, chromedp.ByID),
		chromedp.Evaluate(`document.querySelectorAll("#dead-groups tr.group").length`, &groups),
		chromedp.ActionFunc(func(context.Context) error {
			t.Logf("the first page (50,000 dead letters grouped by the ledger's query) took %v", time.Since(pageStart))
			return nil
		}),
		chromedp.FullScreenshot(shots["status-200k.png"], 100),
		// The group of the third error (the one with addresses and ids).
		chromedp.Click(`//tr[contains(@class,"group")][td[1][contains(., "POST http://#/ingest")]]//a[@class="show-group"]`, chromedp.BySearch),
		chromedp.WaitVisible(`#replay-filter`, chromedp.ByID),
		chromedp.Text(`#dead h2`, &heading, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#dead td.key").length`, &rows),
		chromedp.Text(`#dead td.key`, &firstKey, chromedp.ByQuery),
		chromedp.FullScreenshot(shots["status-200k-group.png"], 100),
		chromedp.Click(`#next-page`, chromedp.ByID),
		chromedp.WaitVisible(`#first-page`, chromedp.ByID),
		chromedp.Text(`#dead h2`, &heading2, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#dead td.key").length`, &rows2),
		chromedp.Text(`#dead td.key`, &firstKey2, chromedp.ByQuery),
		chromedp.FullScreenshot(shots["status-200k-group-page2.png"], 100),
		chromedp.Text(`#replay-filter`, &button, chromedp.ByID),
		chromedp.SendKeys(`form.replay-filter input[name=token]`, "op-secret", chromedp.ByQuery),
		chromedp.ActionFunc(func(context.Context) error { replayStart = time.Now(); return nil }),
		chromedp.Click(`#replay-filter`, chromedp.ByID),
		chromedp.WaitVisible(`#flash`, chromedp.ByID),
		chromedp.ActionFunc(func(context.Context) error { t.Logf("the group's replay took %v", time.Since(replayStart)); return nil }),
		chromedp.Text(`#flash`, &flash, chromedp.ByID),
		chromedp.FullScreenshot(shots["status-200k-replayed.png"], 100),
	)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	for name, shot := range shots {
		path := filepath.Join(testenv.ArtifactDir(t), name)
		if err := os.WriteFile(path, *shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
	if dead != "50000" || groups != len(bigErrors) {
		t.Fatalf("page: %s dead letters, %d groups", dead, groups)
	}
	if !strings.Contains(heading, "12500 selected by the filter") || rows != 50 || rows2 != 50 || firstKey == firstKey2 || !strings.Contains(heading2, "12500 selected") {
		t.Fatalf("the group: %q with %d rows from %q, then %q with %d rows from %q", heading, rows, firstKey, heading2, rows2, firstKey2)
	}
	if button != "Replay the 12500 dead letters the filter selects" || !strings.HasPrefix(flash, "replayed 12500 dead records of error ") {
		t.Fatalf("button %q, then %q", button, flash)
	}
	if n := countOf(t, l, ledger.Dead); n != 37500 {
		t.Fatalf("%d dead letters left, want 37500", n)
	}
	st := statusOf(t, srv, map[string][]string{"error": {class}})
	if st.DeadMatched != 0 || len(st.DeadGroups) != 3 {
		t.Fatalf("after the replay: %d of the class, %d groups", st.DeadMatched, len(st.DeadGroups))
	}
}
