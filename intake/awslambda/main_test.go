package awslambda_test

import (
	"os"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
)

func TestMain(m *testing.M) {
	// The ledger and store URLs carry no credentials: this process reads
	// them from the environment (the services tool exports MinIO's; a MinIO
	// the tests start takes these; dynalite takes any).
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "minioadmin", "AWS_SECRET_ACCESS_KEY": "minioadmin",
		"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"} {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	testmain.Run(m)
}
