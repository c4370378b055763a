package dynamoledger_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairn-s3/cairn/internal/testenv"
	"github.com/cairn-s3/cairn/internal/testmain"
	"github.com/cairn-s3/cairn/ledger"
	"github.com/cairn-s3/cairn/ledger/dynamoledger"
	"github.com/cairn-s3/cairn/ledger/ledgertest"
)

func TestMain(m *testing.M) {
	// The test server takes any credentials; the ledger's URL carries none,
	// so this process and its children read them from the environment.
	for _, kv := range testenv.DynamoDBEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	testmain.Run(m)
}

// newTable returns the URL of a fresh ledger table on the test server.
func newTable(t testing.TB) string {
	t.Helper()
	ep := testenv.DynamoDB(t)
	return "dynamodb://" + testenv.UniqueName("cairn-ledger") + "?endpoint=" + ep + "&region=us-east-1&create_table=true"
}

// open opens url through hc (nil: the SDK's client).
func open(t testing.TB, url string, opts *ledger.Options, hc *http.Client) *ledger.Ledger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var l *ledger.Ledger
	var err error
	if hc != nil {
		l, err = dynamoledger.OpenWithClient(ctx, url, opts, hc)
	} else {
		l, err = dynamoledger.Open(ctx, url, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestConformance(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, ledgertest.Harness{
		New: func(t *testing.T, opts *ledger.Options) (*ledger.Ledger, string) {
			url := newTable(t)
			return open(t, url, opts, nil), url
		},
		Env: testenv.DynamoDBEnv(),
	})
}
