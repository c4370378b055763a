package s3

import (
	"context"

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
// HeadBucket response ("MinIO", "AmazonS3", …).
func (b *Backend) ServerSoftware(ctx context.Context) (string, error) {
	out, err := b.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &b.bucket})
	if err != nil {
		return "", b.mapErr(err, false)
	}
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok && raw != nil {
		return raw.Header.Get("Server"), nil
	}
	return "", nil
}
