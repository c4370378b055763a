package dynamoledger

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/cairn-s3/cairn/ledger"
)

// ExpiresAt is the expires_at attribute (unix seconds, 0 if none) of the
// record of key (latest-state ledgers) in l.
func ExpiresAt(ctx context.Context, l *ledger.Ledger, bucket, key string) (int64, error) {
	b := l.Backend().(*Backend)
	out, err := b.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table, Key: id{bucket, key, key}.key2(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, err
	}
	v, ok := out.Item[attrExpires].(*types.AttributeValueMemberN)
	if !ok {
		return 0, nil
	}
	return strconv.ParseInt(v.Value, 10, 64)
}

// SetFormat writes format into the ledger's descriptor (as an older build
// would have made it).
func SetFormat(ctx context.Context, l *ledger.Ledger, format int) error {
	b := l.Backend().(*Backend)
	_, err := b.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &b.table,
		Key:                       map[string]types.AttributeValue{attrPK: str(metaPK), attrSK: str(metaSK)},
		UpdateExpression:          aws.String("SET #f = :f"),
		ExpressionAttributeNames:  map[string]string{"#f": "format"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": num(int64(format))}})
	return err
}

// TakeLock and DropLock take and give up key's EveryVersion lock for the
// version ident with token, as a claim does.
func TakeLock(ctx context.Context, l *ledger.Ledger, bucket, key, ident string, token int64, until, now time.Time) (bool, error) {
	return l.Backend().(*Backend).takeLock(ctx, bucket, key, lockRef{ident, token}, until, now)
}

// DropLock gives up the lock TakeLock took.
func DropLock(ctx context.Context, l *ledger.Ledger, bucket, key, ident string, token int64) {
	l.Backend().(*Backend).dropLock(ctx, bucket, key, lockRef{ident, token})
}
