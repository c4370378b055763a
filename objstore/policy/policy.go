// Package policy keeps writers that bypass cairn from undoing its guarantees:
// under "create-only" prefixes every write must be write-once (If-None-Match: *),
// and under "cas" prefixes every write must be conditional (If-Match, or
// If-None-Match to create the first version).
//
// On AWS S3, BucketPolicy generates a bucket policy that makes S3 itself deny
// unconditional PutObject under those prefixes (seed 004, scenario 1, with the
// s3:ObjectCreationOperation exemption that lets multipart parts through, and
// with creation allowed under cas prefixes). MinIO rejects the s3:if-none-match
// and s3:if-match condition keys, so for MinIO and other stores Wrap enforces
// the same rules on the client: a wrapped Store refuses unconditional writes
// under the prefixes before they are sent. That only binds the clients that use
// it; the bucket policy binds everyone.
package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cairn-s3/cairn/objstore"
)

// ErrDenied: the write breaks the write policy.
var ErrDenied = errors.New("denied by the write policy")

// Rules name the protected prefixes.
type Rules struct {
	// CreateOnly prefixes accept only write-once writes.
	CreateOnly []string
	// CAS prefixes accept only conditional writes (if-match or if-absent).
	CAS []string
}

func hasPrefix(key string, prefixes []string) (string, bool) {
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) {
			return p, true
		}
	}
	return "", false
}

// Check returns an error wrapping ErrDenied if a write of key under cond breaks r.
func (r Rules) Check(key string, cond objstore.Condition) error {
	if p, ok := hasPrefix(key, r.CreateOnly); ok && !cond.Absent {
		return fmt.Errorf("%w: %q is under create-only prefix %q: write it with if-absent (If-None-Match: *)", ErrDenied, key, p)
	}
	if p, ok := hasPrefix(key, r.CAS); ok && cond.IsZero() {
		return fmt.Errorf("%w: %q is under compare-and-swap prefix %q: write it with if-match (or if-absent to create it)", ErrDenied, key, p)
	}
	return nil
}

// Wrap returns a Backend that refuses writes breaking r before sending them.
func Wrap(b objstore.Backend, r Rules) objstore.Backend { return &wrapped{b, r} }

type wrapped struct {
	objstore.Backend
	r Rules
}

func (w *wrapped) Put(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.Info, error) {
	if err := w.r.Check(key, opts.If); err != nil {
		return objstore.Info{}, err
	}
	return w.Backend.Put(ctx, key, body, size, opts)
}

func (w *wrapped) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (objstore.Info, error) {
	if err := w.r.Check(dst, cond); err != nil {
		return objstore.Info{}, err
	}
	return w.Backend.Copy(ctx, src, dst, cond)
}

func (w *wrapped) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, cond objstore.Condition) (objstore.Info, error) {
	if err := w.r.Check(key, cond); err != nil {
		return objstore.Info{}, err
	}
	return w.Backend.CompleteMultipart(ctx, key, id, parts, cond)
}

func (w *wrapped) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	if p, ok := hasPrefix(key, w.r.CreateOnly); ok {
		return fmt.Errorf("%w: %q is under create-only prefix %q: objects there are never deleted", ErrDenied, key, p)
	}
	return w.Backend.Delete(ctx, key, cond)
}

func (w *wrapped) String() string { return "policy(" + w.Backend.String() + ")" }

// Unwrap returns the backend under the policy (objstore.Wrapper): the policy
// refuses writes with ErrDenied before sending them, and sends the others as
// they are, so what the server enforces is unchanged.
func (w *wrapped) Unwrap() objstore.Backend { return w.Backend }

type statement struct {
	Sid       string                       `json:"Sid"`
	Effect    string                       `json:"Effect"`
	Principal any                          `json:"Principal"`
	Action    string                       `json:"Action"`
	Resource  string                       `json:"Resource"`
	Condition map[string]map[string]string `json:"Condition"`
}

// BucketPolicy returns an AWS bucket policy (JSON) that denies PutObject under
// the prefixes unless the request carries the required condition. principal is
// an IAM ARN, or "" for everyone ("*").
func BucketPolicy(bucket string, r Rules, principal string) ([]byte, error) {
	if bucket == "" {
		return nil, errors.New("policy: a bucket name is required")
	}
	if len(r.CreateOnly)+len(r.CAS) == 0 {
		return nil, errors.New("policy: name at least one create-only or cas prefix")
	}
	var who any = "*"
	if principal != "" {
		who = map[string]string{"AWS": principal}
	}
	var stmts []statement
	sid := func(kind, p string) string {
		var b strings.Builder
		b.WriteString("CairnDenyUnconditional" + kind)
		for _, c := range p {
			if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
				b.WriteRune(c)
			}
		}
		return b.String()
	}
	for _, p := range r.CreateOnly {
		stmts = append(stmts, statement{Sid: sid("Create", p), Effect: "Deny", Principal: who, Action: "s3:PutObject",
			Resource: fmt.Sprintf("arn:aws:s3:::%s/%s*", bucket, p),
			Condition: map[string]map[string]string{
				"Null": {"s3:if-none-match": "true"},
				"Bool": {"s3:ObjectCreationOperation": "true"},
			}})
	}
	for _, p := range r.CAS {
		// Both keys absent means an unconditional write; either one present is fine
		// (if-none-match creates the first version). Conditions in one block AND.
		stmts = append(stmts, statement{Sid: sid("CAS", p), Effect: "Deny", Principal: who, Action: "s3:PutObject",
			Resource: fmt.Sprintf("arn:aws:s3:::%s/%s*", bucket, p),
			Condition: map[string]map[string]string{
				"Null": {"s3:if-match": "true", "s3:if-none-match": "true"},
				"Bool": {"s3:ObjectCreationOperation": "true"},
			}})
	}
	return json.MarshalIndent(map[string]any{"Version": "2012-10-17", "Statement": stmts}, "", "  ")
}
