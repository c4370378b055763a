// Package awslambda runs cairn's intake inside AWS Lambda: S3 events reach a
// function directly, through SQS (standard or FIFO), through SNS (directly or
// through SQS) or through EventBridge (directly or through SQS), and each key's
// newest accepted event is handled once, in order, never overlapping, with a
// fencing token: the same contract as `cairn serve`, with no server to run.
//
// A Go program calls it from main with its intake.Handler:
//
//	l, err := ledger.Open(ctx, os.Getenv("CAIRN_LEDGER"), nil) // s3://bucket/prefix, postgres://…, dynamodb://…
//	f, err := awslambda.New(l, intake.HandlerFunc(handle), nil)
//	log.Fatal(f.Start())
//
// and is built as a custom runtime's bootstrap (provided.al2023):
//
//	GOOS=linux GOARCH=arm64 go build -tags lambda.norpc -o bootstrap
//
// The `cairn lambda` command is such a bootstrap for handlers run as commands
// or HTTP endpoints, configured from the function's environment.
//
// # What an invocation does
//
// It records the payload's events in the ledger (one transaction for the
// whole batch), answers the event source, and runs work with the time it
// has: the work it recorded and whatever else is due (older work first: the
// ledger hands out the earliest due first), until nothing it can run is left
// (Pipeline.Quiesce) or StopBefore before its deadline. Work it cannot run
// now (a key another invocation runs, a retry's backoff) stays in the
// ledger: the invocation that holds the key claims the newer work before it
// returns, and a scheduled invocation (an EventBridge schedule, or the
// payload DrainPayload, every minute) runs the rest; a slower schedule
// (JobsPayload) runs the Jobs (an audit) and the purge.
//
// # Guarantees
//
//   - Nothing acknowledged is lost. An SQS batch's answer
//     (ReportBatchItemFailures) names the messages whose events are not in the
//     ledger, and never one the ledger is known to hold (accepted, duplicate,
//     stale, done or dead); one whose recording's outcome is unknown (the
//     ledger's answer did not come in time) is named too: delivered again, it
//     is a duplicate. The invocation fails as a whole only when nothing could
//     be recorded. On a FIFO queue, the messages of a group after one that failed
//     are failed too, so the group's order holds. A direct or SNS invocation
//     fails only when its events are not recorded.
//   - What is no event never fails the good messages of its batch: on SQS it
//     is reported failed alone (PoisonDLQ, for the queue's redrive policy) or
//     kept in the ledger as a dead letter (PoisonLedger); elsewhere it is kept
//     as a dead letter (intake.RefusedBucket).
//   - Once, in order, never overlapping per key, across concurrent invocations
//     in any number of sandboxes (the ledger's claims and fencing tokens).
//   - A timeout loses nothing and leaves nothing stuck: handlers are stopped
//     StopBefore the deadline and their attempt settled (a retry); a process
//     Lambda kills anyway (a handler that ignores its context) leaves a claim
//     whose lease (the invocation's time, at least intake.MinLease and at
//     most intake.DefaultLease) runs out, after which the key is taken over with a
//     higher fencing token, and package fence refuses the killed handler's late
//     writes.
//
// # Limits
//
//   - Handler outcomes do not reach the event source: a message is
//     acknowledged once its events are recorded, and the ledger retries a
//     failed handler (with backoff, then a dead letter); those retries run
//     in later invocations or the scheduled drain, so schedule one.
//   - The SQLite ledger cannot be shared between sandboxes (each has its own
//     disk): New refuses it (ledger.Ledger.Local); use the object-store
//     ledger (the bucket itself), PostgreSQL or DynamoDB.
//   - On the object-store ledger, a process killed within milliseconds of
//     recording (before its work index entry is written: Ledger.Flush runs
//     while the handlers do) leaves its claims to be found by the next sweep
//     of a process that claims (at most objledger's SweepEvery, a minute,
//     after the lease), not right after the lease.
//   - Between invocations Lambda freezes the process: a ledger write in
//     flight then lands late, which every ledger tolerates.
//   - Events for cairn's own objects (cairn.OwnPrefixes) are skipped; an
//     object-store ledger kept under another prefix of a bucket whose
//     notifications reach the function must be named in
//     Options.Pipeline.OwnPrefixes (`cairn lambda` does this from its
//     --ledger), or its writes come back as events.
package awslambda
