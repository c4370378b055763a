package lambda_test

import (
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }
