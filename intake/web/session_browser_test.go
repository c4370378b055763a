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
	"github.com/cairn-s3/cairn/ledger"
)

// TestOperatorLoginInChromium: in a real Chromium the operator logs in once,
// replays two dead letters without giving the token again, and logs out;
// the page's script cannot read the cookie (HttpOnly; its other attributes
// are checked by TestOperatorLogin), and after the logout the forms ask for
// the token again (issue 38).
func TestOperatorLoginInChromium(t *testing.T) {
	bin := testenv.Chromium(t)
	l := deadLedger(t, 2)
	srv := httptest.NewServer(web.Handler(l, &web.Options{OperatorToken: "op-secret"}))
	defer srv.Close()
	ctx := browser(t, bin)
	var before, after, fieldsLoggedIn, fieldsLoggedOut int
	var state, flash1, flash2, script, bye string
	var shot []byte
	err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#login`, chromedp.ByID),
		chromedp.Evaluate(`document.querySelectorAll("form.replay input[name=token]").length`, &before),
		chromedp.SendKeys(`#login-token`, "op-secret", chromedp.ByID),
		chromedp.Click(`#login`, chromedp.ByID),
		chromedp.WaitVisible(`#logout`, chromedp.ByID),
		chromedp.Text(`#login-state`, &state, chromedp.ByID),
		chromedp.Evaluate(`document.querySelectorAll("input[name=token]").length`, &fieldsLoggedIn),
		chromedp.Evaluate(`document.cookie`, &script),
		chromedp.FullScreenshot(&shot, 100),
		chromedp.Click(`form.replay button`, chromedp.ByQuery),
		chromedp.WaitVisible(`//section[@id="flash"][contains(., "dead-0.jpg")]`, chromedp.BySearch),
		chromedp.Text(`#flash`, &flash1, chromedp.ByID),
		chromedp.Click(`form.replay button`, chromedp.ByQuery),
		chromedp.WaitVisible(`//section[@id="flash"][contains(., "dead-1.jpg")]`, chromedp.BySearch),
		chromedp.Text(`#flash`, &flash2, chromedp.ByID),
		chromedp.Click(`#logout`, chromedp.ByID),
		chromedp.WaitVisible(`//section[@id="flash"][contains(., "logged out")]`, chromedp.BySearch),
		chromedp.Text(`#flash`, &bye, chromedp.ByID),
		chromedp.Evaluate(`document.querySelectorAll("#dead tr").length`, &after),
		chromedp.Evaluate(`document.querySelectorAll("#login-token").length`, &fieldsLoggedOut),
	)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if before != 2 || fieldsLoggedIn != 0 || fieldsLoggedOut != 1 {
		t.Fatalf("token fields: %d before the login, %d logged in, login field after logout %d", before, fieldsLoggedIn, fieldsLoggedOut)
	}
	if !strings.Contains(state, "Logged in as operator until") || script != "" {
		t.Fatalf("logged in: %q; the page's script reads cookies %q", state, script)
	}
	if !strings.Contains(flash1, "replayed 1 record") || !strings.Contains(flash2, "replayed 1 record") || bye != "logged out" {
		t.Fatalf("flashes %q, %q, %q", flash1, flash2, bye)
	}
	if n := countOf(t, l, ledger.Dead); n != 0 {
		t.Fatalf("%d dead letters left after two logged-in replays", n)
	}
	path := filepath.Join(testenv.ArtifactDir(t), "status-logged-in.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
