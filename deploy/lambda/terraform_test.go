// Package lambda_test checks the deployment templates of cairn on AWS
// Lambda (the folder holds no Go code of its own).
package lambda_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testing/testenv"
)

// The Terraform template initialises from the local provider mirror,
// validates, is formatted, and its plan (terraform test, against a mocked
// AWS provider) has what cairn relies on: a custom runtime running
// bootstrap, partial batch responses, a redrive policy, the bucket's
// notifications to the queue, the drain schedule, each ledger's permissions.
// Everything terraform writes stays in temporary directories.
func TestTerraformTemplate(t *testing.T) {
	t.Parallel()
	bin, plugins := testenv.Terraform(t)
	dir := filepath.Join(t.TempDir(), "terraform")
	if err := os.CopyFS(dir, os.DirFS("terraform")); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cliConfig := filepath.Join(home, "terraformrc")
	if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "TF_") || strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "CHECKPOINT_")
	})
	env = append(env, "HOME="+home, "TF_CLI_CONFIG_FILE="+cliConfig, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"init", "-backend=false", "-plugin-dir=" + plugins, "-input=false", "-no-color"},
		{"validate", "-no-color"},
		{"fmt", "-check", "-recursive", "-no-color"},
		{"test", "-no-color"},
	} {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	// Nothing was written outside the temporary directories: the template's
	// own folder is as it was.
	err := filepath.WalkDir("terraform", func(p string, d fs.DirEntry, err error) error {
		if err == nil && (d.Name() == ".terraform" || d.Name() == ".terraform.lock.hcl") {
			t.Errorf("terraform wrote %s into the template's folder", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
