package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-s3/cairn/internal/testing/testmain"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
	"github.com/cairn-s3/cairn/objstore/objstoretest"
	"github.com/cairn-s3/cairn/objstore/policy"
)

func TestMain(m *testing.M) { testmain.Run(m) }

var rules = policy.Rules{CreateOnly: []string{"datasets/"}, CAS: []string{"metastore/"}}

// Outside the protected prefixes the wrapper changes nothing.
func TestConformance(t *testing.T) {
	objstoretest.Run(t, objstoretest.Harness{New: func(t *testing.T) objstoretest.Instance {
		b := mem.OpenBackend("")
		return objstoretest.Instance{Store: objstore.New(policy.Wrap(b, rules), nil), Uploads: b.Uploads}
	}})
}

func TestWrapEnforces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := objstore.New(policy.Wrap(mem.OpenBackend(""), rules), nil)
	put := func(key string, cond objstore.Condition) error {
		_, err := s.PutBytes(ctx, key, []byte("x"), &objstore.PutOptions{If: cond})
		return err
	}
	if err := put("datasets/a.parquet", objstore.Condition{}); !errors.Is(err, policy.ErrDenied) {
		t.Errorf("unconditional write under create-only: %v", err)
	}
	if err := put("datasets/a.parquet", objstore.IfAbsent()); err != nil {
		t.Errorf("write-once under create-only: %v", err)
	}
	if err := s.Delete(ctx, "datasets/a.parquet", objstore.Condition{}); !errors.Is(err, policy.ErrDenied) {
		t.Errorf("delete under create-only: %v", err)
	}
	if err := put("metastore/r.json", objstore.Condition{}); !errors.Is(err, policy.ErrDenied) {
		t.Errorf("unconditional write under cas: %v", err)
	}
	if err := put("metastore/r.json", objstore.IfAbsent()); err != nil {
		t.Errorf("first version under cas: %v", err)
	}
	info, _ := s.Head(ctx, "metastore/r.json")
	if err := put("metastore/r.json", objstore.IfMatch(info.ETag)); err != nil {
		t.Errorf("cas write under cas: %v", err)
	}
	if _, err := s.Copy(ctx, "metastore/r.json", "datasets/copy", objstore.Condition{}); !errors.Is(err, policy.ErrDenied) {
		t.Errorf("unconditional copy into create-only: %v", err)
	}
	if _, err := s.Upload(ctx, "datasets/big", bytes.NewReader(make([]byte, 3000)), &objstore.UploadOptions{PartSize: 1024}); !errors.Is(err, policy.ErrDenied) {
		t.Errorf("unconditional multipart upload into create-only: %v", err)
	}
}

func TestBucketPolicy(t *testing.T) {
	t.Parallel()
	data, err := policy.BucketPolicy("my-bucket", rules, "arn:aws:iam::111111111111:role/role1")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Statement []struct {
			Effect, Action, Resource string
			Condition                map[string]map[string]string
		}
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Statement) != 2 {
		t.Fatalf("%d statements", len(p.Statement))
	}
	create, cas := p.Statement[0], p.Statement[1]
	if create.Resource != "arn:aws:s3:::my-bucket/datasets/*" || create.Condition["Null"]["s3:if-none-match"] != "true" ||
		create.Condition["Bool"]["s3:ObjectCreationOperation"] != "true" || create.Effect != "Deny" || create.Action != "s3:PutObject" {
		t.Errorf("create-only statement: %+v", create)
	}
	if cas.Condition["Null"]["s3:if-match"] != "true" || cas.Condition["Null"]["s3:if-none-match"] != "true" {
		t.Errorf("cas statement must deny only when both conditions are absent: %+v", cas)
	}
	if _, err := policy.BucketPolicy("", rules, ""); err == nil || !strings.Contains(err.Error(), "bucket") {
		t.Errorf("missing bucket: %v", err)
	}
}
