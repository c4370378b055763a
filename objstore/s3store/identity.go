package s3store

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/cairn-s3/cairn/objstore"
)

// ServerLocation implements objstore.ServerIdentifier: the endpoint requests
// go to (from the URL or AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL; "aws:REGION"
// for AWS itself) and the bucket.
func (b *Backend) ServerLocation() objstore.ServerLocation {
	o := b.c.Options()
	ep := aws.ToString(o.BaseEndpoint)
	if ep == "" {
		ep = "aws:" + o.Region
	}
	return objstore.ServerLocation{Endpoint: ep, Bucket: b.bucket}
}

// ServerSoftware implements objstore.ServerIdentifier: the Server header of a
// HeadBucket response ("MinIO", "AmazonS3", …) or, if there is none (Ceph
// RGW, s3rver), the names of the vendor headers it carries
// ("x-amz-request-id x-rgw-bytes-used …": other software answers with
// others); "" if it carries neither, and the server cannot be identified.
func (b *Backend) ServerSoftware(ctx context.Context) (string, error) {
	out, err := b.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &b.bucket})
	if err != nil {
		return "", b.mapErr(err, false)
	}
	raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response)
	if !ok || raw == nil {
		return "", nil
	}
	return serverIdentity(raw.Header), nil
}

// genericHeaders are x- headers that web servers and proxies of every kind
// add: they say nothing about the S3 software.
var genericHeaders = map[string]bool{"x-content-type-options": true, "x-xss-protection": true, "x-frame-options": true}

func serverIdentity(h http.Header) string {
	if sw := h.Get("Server"); sw != "" {
		return sw
	}
	var names []string
	for name := range h {
		n := strings.ToLower(name)
		if strings.HasPrefix(n, "x-") && !genericHeaders[n] {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return "(no Server header; sends " + strings.Join(names, " ") + ")"
}
