package ledgertest_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// The suite is public: a ledger backend in another module runs it, process
// cases included, so it depends on what a ledger backend needs and on none of
// cairn's test scaffolding (which once pulled in nats-server and the S3 SDK,
// ≈380 packages, and ran the suite's children from its own registry).
func TestDependsOnTheLedgerOnly(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const cairn = "github.com/cairn-s3/cairn/"
	forbidden := []string{
		"github.com/nats-io/",
		"github.com/aws/aws-sdk-go-v2",
		cairn + "internal/test",
		cairn + "internal/testing/services",
		cairn + "internal/testing/faultproxy",
		cairn + "objstore",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("ledgertest depends on %s: keep the public suite to the ledger's own dependencies", pkg)
			}
		}
	}
}
