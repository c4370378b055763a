package lambdatest

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Function's settings that the emulator would misread are refused with a
// message that says what to do; the defaults are Lambda's.
func TestFunctionEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		f       Function
		wantErr string
	}{
		{"no bootstrap", Function{}, "Bootstrap is required"},
		{"fractional timeout", Function{Bootstrap: "b", Timeout: 1500 * time.Millisecond}, "not a whole number of seconds"},
		{"sub-second timeout", Function{Bootstrap: "b", Timeout: 500 * time.Millisecond}, "not a whole number of seconds"},
		{"max concurrency", Function{Bootstrap: "b", Env: []string{"AWS_LAMBDA_MAX_CONCURRENCY=4"}}, "Managed Instances"},
		{"timeout in env", Function{Bootstrap: "b", Env: []string{"AWS_LAMBDA_FUNCTION_TIMEOUT=9"}}, "through Function's Timeout"},
		{"not KEY=value", Function{Bootstrap: "b", Env: []string{"FOO"}}, "not KEY=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.f.env("/d"); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
	env, err := Function{Bootstrap: "b", Env: []string{"AWS_REGION=eu-west-1"}}.env("/d")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"TMPDIR=/d/tmp", "AWS_LAMBDA_FUNCTION_NAME=cairn-test", "AWS_LAMBDA_FUNCTION_TIMEOUT=3",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128", "AWS_REGION=eu-west-1"} {
		if !slices.Contains(env, kv) {
			t.Errorf("env %q lacks %s", env, kv)
		}
	}
	if i, j := slices.Index(env, "AWS_REGION=us-east-1"), slices.Index(env, "AWS_REGION=eu-west-1"); i > j {
		t.Errorf("Function.Env does not come last (it must win): %q", env)
	}
}
