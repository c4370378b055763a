package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	_ "modernc.org/sqlite"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/objstore"
	"github.com/cairn-s3/cairn/objstore/mem"
)

// A worker that lost its lease (token 7) resumes after its successor (token 8)
// has written the output: its write is refused, and the successor's stays.
func ExamplePut() {
	ctx := context.Background()
	s := mem.Open()

	_, err := fence.PutBytes(ctx, s, "reports/daily.csv", []byte("successor's rows\n"), 8, nil)
	fmt.Println("token 8 writes:", err == nil)

	_, err = fence.PutBytes(ctx, s, "reports/daily.csv", []byte("stale rows\n"), 7, nil)
	fmt.Println("token 7 refused:", errors.Is(err, fence.ErrStale))
	fmt.Println(err)

	body, m, _ := fence.Get(ctx, s, "reports/daily.csv")
	fmt.Printf("object: %q, token %d\n", body, m.Token)
	// Output:
	// token 8 writes: true
	// token 7 refused: true
	// fence: refused the write to "reports/daily.csv": fencing token 7 is lower than token 8, which has already written it (a newer holder took over); nothing was written: stop, the work belongs to the newer holder
	// object: "successor's rows\n", token 8
}

// A delete leaves a tombstone that keeps the token: a stale writer cannot
// bring the object back.
func ExampleDelete() {
	ctx := context.Background()
	s := mem.Open()

	_, _ = fence.PutBytes(ctx, s, "state/job-42", []byte("running"), 3, nil)
	fmt.Println("token 4 deletes:", fence.Delete(ctx, s, "state/job-42", 4, nil) == nil)

	_, _, err := fence.Get(ctx, s, "state/job-42")
	fmt.Println("reads as not found:", errors.Is(err, objstore.ErrNotFound))

	_, err = fence.PutBytes(ctx, s, "state/job-42", []byte("running"), 3, nil)
	fmt.Println("token 3 cannot recreate it:", errors.Is(err, fence.ErrStale))

	tok, _ := fence.Token(ctx, s, "state/job-42")
	fmt.Println("recorded token:", tok)
	// Output:
	// token 4 deletes: true
	// reads as not found: true
	// token 3 cannot recreate it: true
	// recorded token: 4
}

// A document update carries the token; a lower one changes nothing.
func ExampleUpdate() {
	ctx := context.Background()
	d := docstore.New(mem.Open(), nil)
	type job struct{ Done int }

	_, _, err := fence.Update(ctx, d, "jobs/compact.json", 12, func(j *job, _ fence.DocMeta) error {
		j.Done = 100
		return nil
	})
	fmt.Println("token 12 updates:", err == nil)

	_, _, err = fence.Update(ctx, d, "jobs/compact.json", 11, func(j *job, _ fence.DocMeta) error {
		j.Done = 40
		return nil
	})
	fmt.Println("token 11 refused:", errors.Is(err, fence.ErrStale))

	j, m, _ := fence.Load[job](ctx, d, "jobs/compact.json")
	fmt.Printf("done %d, token %d\n", j.Done, m.Token)
	// Output:
	// token 12 updates: true
	// token 11 refused: true
	// done 100, token 12
}

// The SQL pattern on SQLite: the token column decides inside the statement.
func ExampleSQLExec() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	if _, err := db.ExecContext(ctx, `CREATE TABLE outputs (
		key TEXT PRIMARY KEY, fence_token BIGINT NOT NULL, value TEXT NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}
	upsert, _ := fence.SQLUpsert(fence.SQLite, "outputs", "key", "fence_token", "value")
	fmt.Println(upsert)

	fmt.Println("token 5 writes:", fence.SQLExec(ctx, db, upsert, "orders/17", 5, "shipped") == nil)
	fmt.Println("token 6 writes:", fence.SQLExec(ctx, db, upsert, "orders/17", 6, "refunded") == nil)
	err = fence.SQLExec(ctx, db, upsert, "orders/17", 5, "shipped again") // the stalled worker wakes up
	fmt.Println("token 5 refused:", errors.Is(err, fence.ErrStale))

	var value string
	var tok int64
	_ = db.QueryRowContext(ctx, `SELECT value, fence_token FROM outputs WHERE key = ?`, "orders/17").Scan(&value, &tok)
	fmt.Println("row:", value, tok)
	// Output:
	// INSERT INTO outputs (key, fence_token, value) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO UPDATE SET fence_token = excluded.fence_token, value = excluded.value WHERE excluded.fence_token >= outputs.fence_token
	// token 5 writes: true
	// token 6 writes: true
	// token 5 refused: true
	// row: refunded 6
}

// An operator rewrites a fenced object without holding the lock: the mark
// (token 8) is carried forward, so the stalled holder (token 7) is still
// refused afterwards.
func ExamplePutKeepingMark() {
	ctx := context.Background()
	s := mem.Open()

	_, _ = fence.PutBytes(ctx, s, "reports/daily.csv", []byte("successor's rows\n"), 8, nil)
	_, err := fence.PutKeepingMark(ctx, s, "reports/daily.csv", strings.NewReader("corrected rows\n"), nil)
	fmt.Println("written without a token:", err == nil)

	_, err = fence.PutBytes(ctx, s, "reports/daily.csv", []byte("stale rows\n"), 7, nil)
	fmt.Println("token 7 still refused:", errors.Is(err, fence.ErrStale))

	body, m, _ := fence.Get(ctx, s, "reports/daily.csv")
	fmt.Printf("object: %q, token %d\n", body, m.Token)
	// Output:
	// written without a token: true
	// token 7 still refused: true
	// object: "corrected rows\n", token 8
}

// A writer without a token that must not touch fenced objects checks what
// it read, then writes conditionally on that version.
func ExampleCheckUnfenced() {
	ctx := context.Background()
	s := mem.Open()
	_, _ = fence.PutBytes(ctx, s, "reports/daily.csv", []byte("rows\n"), 8, nil)

	info, _ := s.Head(ctx, "reports/daily.csv")
	if err := fence.CheckUnfenced("reports/daily.csv", info); err != nil {
		fmt.Println(errors.Is(err, fence.ErrFenced))
		fmt.Println(err)
		return
	}
	_, _ = s.PutBytes(ctx, "reports/daily.csv", []byte("plain rows\n"), &objstore.PutOptions{If: objstore.IfMatch(info.ETag)})
	// Output:
	// true
	// fence: "reports/daily.csv" is fenced (highest token 8): a write without a token would erase that mark and let a stale holder in; nothing was written: write with the holder's token (fence.Put, fence.Update), or keep the mark (fence.PutKeepingMark, fence.UpdateKeepingMark)
}

// An update without a token changes the value of a fenced document and keeps
// its mark; fn sees the value, never the wrapper.
func ExampleUpdateKeepingMark() {
	ctx := context.Background()
	d := docstore.New(mem.Open(), nil)
	type job struct{ Done int }

	_, _, _ = fence.Update(ctx, d, "jobs/compact.json", 12, func(j *job, _ fence.DocMeta) error {
		j.Done = 100
		return nil
	})
	j, m, err := fence.UpdateKeepingMark(ctx, d, "jobs/compact.json", func(j *job, m fence.DocMeta) error {
		j.Done = 0 // an operator resets the job
		return nil
	})
	fmt.Printf("done %d, token %d, %v\n", j.Done, m.Token, err)

	_, _, err = fence.Update(ctx, d, "jobs/compact.json", 11, func(j *job, _ fence.DocMeta) error { return nil })
	fmt.Println("token 11 still refused:", errors.Is(err, fence.ErrStale))
	// Output:
	// done 0, token 12, <nil>
	// token 11 still refused: true
}
