package ledger

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// ErrorGroup is the records of one error class (ErrorClass of their last
// error): how many, when the first and the last of them were last updated
// (for dead letters: when they died), and the first few of them in (bucket,
// key) order.
type ErrorGroup struct {
	Class    string       `json:"class"`
	Count    int          `json:"count"`
	First    time.Time    `json:"first_seen"`
	Last     time.Time    `json:"last_seen"`
	Examples []ExampleKey `json:"example_keys"`
}

// ExampleKey names one record of an ErrorGroup.
type ExampleKey struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// ErrorGroups is what Ledger.GroupErrors returns.
type ErrorGroups struct {
	// Groups are the largest classes, the largest first (then by class),
	// at most the limit asked for.
	Groups []ErrorGroup
	// Total is how many records the filter selects, of every class.
	Total int
	// Classes is how many classes those records are of, listed or not
	// (those counted: see Other).
	Classes int
	// Other is how many records are of classes past the first
	// MaxCountedClasses a backend without ErrorGrouper counted (their
	// classes are not kept); always 0 where the backend groups in its own
	// query.
	Other int
}

// MaxCountedClasses bounds the classes Ledger.GroupErrors counts on a
// backend that does not group in its own query (its memory does not grow
// with the ledger); records of further classes are counted in
// ErrorGroups.Other.
const MaxCountedClasses = 1000

// ErrorGrouper is implemented by backends that keep each record's error
// class (ErrorClass of its LastError, computed when the error is written)
// where their own queries can group and select by it, off an index: the
// SQL ledgers (SQLite and PostgreSQL). A backend that implements it also
// honours Filter.ErrorClass in List and Selection.ErrorClass in Replay. Ledger.GroupErrors and Ledger.List use
// it when present; without it they read every record the rest of the filter
// selects, through List, and match the class as they read.
type ErrorGrouper interface {
	// GroupErrors is Ledger.GroupErrors; it gets limit ≥ 1 and examples ≥ 0.
	GroupErrors(ctx context.Context, f Filter, limit, examples int) (ErrorGroups, error)
}

// GroupsErrorsInQuery reports whether the backend groups and selects records
// by error class in its own queries (ErrorGrouper), so that GroupErrors and
// List with Filter.ErrorClass cost an index's range; where it does not, they
// read every record the rest of the filter selects.
func (l *Ledger) GroupsErrorsInQuery() bool {
	_, ok := l.b.(ErrorGrouper)
	return ok
}

// GroupErrors groups the records f selects by ErrorClass of their last error:
// f's Status, Bucket, Prefix, Through and ErrorClass select (its cursor and
// Limit are not used). It returns the limit largest classes (at least 1),
// each with its first examples records in (bucket, ident) order, and how
// many records and classes there are in all. A backend that implements
// ErrorGrouper answers with one grouped query; on others every record f
// selects is read (see MaxCountedClasses).
func (l *Ledger) GroupErrors(ctx context.Context, f Filter, limit, examples int) (ErrorGroups, error) {
	limit, examples = max(limit, 1), max(examples, 0)
	if g, ok := l.b.(ErrorGrouper); ok {
		return g.GroupErrors(ctx, f, limit, examples)
	}
	var out ErrorGroups
	counts := map[string]*ErrorGroup{}
	err := l.scan(ctx, f, func(c Claim) bool {
		out.Total++
		class := ErrorClass(c.LastError)
		e := counts[class]
		if e == nil {
			if len(counts) >= MaxCountedClasses {
				out.Other++
				return true
			}
			e = &ErrorGroup{Class: class, First: c.Updated, Last: c.Updated}
			counts[class] = e
		}
		e.Count++
		if c.Updated.Before(e.First) {
			e.First = c.Updated
		}
		if c.Updated.After(e.Last) {
			e.Last = c.Updated
		}
		if len(e.Examples) < examples {
			e.Examples = append(e.Examples, ExampleKey{Bucket: c.Bucket, Key: c.Key})
		}
		return true
	})
	if err != nil {
		return ErrorGroups{}, err
	}
	out.Classes = len(counts)
	for _, e := range counts {
		out.Groups = append(out.Groups, *e)
	}
	SortErrorGroups(out.Groups)
	out.Groups = out.Groups[:min(len(out.Groups), limit)]
	return out, nil
}

// SortErrorGroups puts groups in the order GroupErrors returns them: the
// largest first, then by class (byte order).
func SortErrorGroups(gs []ErrorGroup) {
	slices.SortFunc(gs, func(a, b ErrorGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Class, b.Class))
	})
}

// scanPage is how many records a scan of a backend without ErrorGrouper
// reads per List.
const scanPage = 1000

// scan calls fn with each record f selects (its ErrorClass too, matched
// here), in (bucket, ident) order from f's cursor, scanPage at a time, until
// fn returns false: what a backend without ErrorGrouper costs.
func (l *Ledger) scan(ctx context.Context, f Filter, fn func(Claim) bool) error {
	class := f.ErrorClass
	f.ErrorClass, f.Limit = "", scanPage
	for {
		cs, err := l.b.List(ctx, f)
		if err != nil || len(cs) == 0 {
			return err
		}
		for _, c := range cs {
			if class != "" && ErrorClass(c.LastError) != class {
				continue
			}
			if !fn(c) {
				return nil
			}
		}
		last := cs[len(cs)-1]
		f.AfterBucket, f.AfterIdent = last.Bucket, last.Ident
	}
}
