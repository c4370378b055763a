package dynamoledger

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/cairn-s3/cairn/ledger/driver"
)

// With Options.EveryVersion only one version of a key may be claimed at a
// time. A claimer reads the key's versions before it claims one, but two
// claimers can both pass that check (one claiming a newer version while an
// older one arrives and is claimed by the other) and DynamoDB's conditions
// hold on one item only. So the key has a lock item beside its records (sort
// key "lock"): the version whose claim holds it (holder, token) and until
// when (lease_until, the claim's lease). A claim takes it by a conditional
// write (free, expired, or already this version's) before it writes the
// version's claim; Renew extends it with the claim; Complete, Fail and
// Release give it up. A lock whose giving up was lost expires with the
// lease, so it delays other versions at most a lease, never blocks them.
//
// Giving the lock up keeps the item and its token (the last claim's), and a
// claim takes the lock only with a token above it: a claimer that read the
// key's tokens, then lost the race to another claimer that claimed (and
// perhaps finished) a version in between, is refused instead of handing
// out a token that is not above the other claim's. The item stays for as
// long as the key's records do, and longer: one small item per key.
const lockSK = "lock"

func lockKey(bucket, key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: str(recordPK(bucket, key)), attrSK: str(lockSK)}
}

// lockRef is a lock a claim took.
type lockRef struct {
	ident string
	token int64
}

// takeLock takes the key's lock for ident's claim with token until until,
// judged at now: false if another version's claim holds it.
func (b *Backend) takeLock(ctx context.Context, bucket, key string, l lockRef, until, now time.Time) (bool, error) {
	item := lockKey(bucket, key)
	item["holder"], item["token"], item["lease_until"] = str(l.ident), num(l.token), num(driver.UnixMilli(until))
	// A retry of a write that landed passes too: the holder and token are
	// this claim's.
	_, err := b.c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &b.table, Item: item,
		ConditionExpression: aws.String("attribute_not_exists(pk) OR " +
			"((lease_until < :now OR holder = :h) AND (attribute_not_exists(#tk) OR #tk < :t)) OR (holder = :h AND #tk = :t)"),
		ExpressionAttributeNames: map[string]string{"#tk": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": num(driver.UnixMilli(now)), ":h": str(l.ident),
			":t": num(l.token)}})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return false, nil
	}
	if err != nil {
		return false, b.wrap("taking the key's lock", err)
	}
	return true, nil
}

// renewLock extends the lock l holds to until: false if l no longer holds it.
func (b *Backend) renewLock(ctx context.Context, bucket, key string, l lockRef, until time.Time) (bool, error) {
	_, err := b.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &b.table, Key: lockKey(bucket, key),
		UpdateExpression: aws.String("SET lease_until = :u"), ConditionExpression: aws.String("holder = :h AND #tk = :t"),
		ExpressionAttributeNames: map[string]string{"#tk": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": num(driver.UnixMilli(until)), ":h": str(l.ident),
			":t": num(l.token)}})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return false, nil
	}
	if err != nil {
		return false, b.wrap("renewing the key's lock", err)
	}
	return true, nil
}

// dropLock gives up the lock l holds, if it still does, keeping its token.
// A failure is left to the lock's expiry.
func (b *Backend) dropLock(ctx context.Context, bucket, key string, l lockRef) {
	_, _ = b.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &b.table, Key: lockKey(bucket, key),
		UpdateExpression:          aws.String("SET lease_until = :free REMOVE holder"),
		ConditionExpression:       aws.String("holder = :h AND #tk = :t"),
		ExpressionAttributeNames:  map[string]string{"#tk": "token"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":h": str(l.ident), ":t": num(l.token), ":free": num(0)}})
}
