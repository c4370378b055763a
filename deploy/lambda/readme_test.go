package lambda_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's Go main for Lambda builds, as its build command says (with
// -tags lambda.norpc; for this machine's architecture, not arm64, so the
// build cache serves it): a user copying it gets a bootstrap.
func TestReadmeLambdaMainBuilds(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "**From Go**")
	if !ok {
		t.Fatal("the README has no **From Go** paragraph in its Lambda section")
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	src, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !strings.HasPrefix(src, "package main\n") || !strings.Contains(src, "awslambda.New(") {
		t.Fatalf("the README's Lambda section has no Go main after **From Go**: %q", src)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The main lives, for the build only, in a package of this module that
	// is not on disk (go build -overlay), so it imports cairn as a user's
	// module would, at this commit.
	pkg := filepath.Join(root, "deploy", "lambda", "readmemain")
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(pkg, "main.go"): file}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-overlay", overlayFile, "-o", filepath.Join(dir, "bootstrap"), "./deploy/lambda/readmemain")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go main does not build: %v\n%s\n%s", err, out, src)
	}
}
