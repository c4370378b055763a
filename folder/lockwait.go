package folder

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/lock/pathlock"
	"github.com/cairn-s3/cairn/lock/treelock"
	"github.com/cairn-s3/cairn/objstore"
)

// Wait describes a lock request that must wait for others (see
// TreeLocker.Waiting).
type Wait struct {
	Read, Write []string
	// Holders are the entries in the way, as the lock's documents record
	// them when the wait begins (empty if they could not be read).
	Holders []Holder
}

// Holder is one entry of the tree lock that blocks a request: it holds Path
// in Mode, or waits for it ahead of the request.
type Holder struct {
	Path    string `json:"path"`
	Mode    string `json:"mode"`
	Waiting bool   `json:"waiting,omitempty"` // queued ahead, not holding
	Session string `json:"session"`
	// Who is the session's process as it recorded itself: "host/pid"; ""
	// when its session document is gone (it ended, or was judged dead).
	Who string `json:"who,omitempty"`
}

// The tree lock's documents, as far as Holders reads them. They are
// treelock's own layout under its default prefix (cairn-locks/tree/): a
// change there shows as no holders named, never as a wrong name.
type (
	treeEntry struct {
		Session string        `json:"s"`
		Mode    pathlock.Mode `json:"m"`
	}
	treeNode struct {
		Holders []treeEntry `json:"holders"`
		Queue   []treeEntry `json:"queue"`
		Epoch   string      `json:"epoch"`
	}
	treeSession struct {
		Holder string `json:"holder"`
	}
)

const treePrefix = LockPrefix + "tree/"

// TreeHolders reads, best effort and without locking, the entries of the
// tree lock on s (default prefix) that stand in the way of the request
// (read, write): holders of its paths in a mode incompatible with the one
// it needs, and entries queued ahead of it.
func TreeHolders(ctx context.Context, s *objstore.Store, read, write []string) []Holder {
	steps, err := pathlock.Plan(pathlock.Request{Read: read, Write: write})
	if err != nil {
		return nil
	}
	d := docstore.New(s, &docstore.Options{NoGroupCommit: true})
	nodes, sessions := docstore.Typed[treeNode](d), docstore.Typed[treeSession](d)
	epochs := map[string]string{}
	who := map[string]string{}
	var out []Holder
	for _, st := range steps {
		key := treePrefix + "paths/" + url.PathEscape(st.Path)
		if st.Path != "/" {
			parent := st.Path[:strings.LastIndex(st.Path, "/")]
			if parent == "" {
				parent = "/"
			}
			e, ok := epochs[parent]
			if !ok {
				break // the parent has no document: neither has anything below
			}
			key += "/" + e
		}
		n, _, err := nodes.Load(ctx, key)
		if err != nil {
			break
		}
		epochs[st.Path] = n.Epoch
		add := func(e treeEntry, waiting bool) {
			if _, ok := who[e.Session]; !ok {
				sd, _, err := sessions.Load(ctx, treePrefix+"sessions/"+e.Session)
				if err != nil && !errors.Is(err, objstore.ErrNotFound) {
					return
				}
				who[e.Session] = sd.Holder
			}
			out = append(out, Holder{Path: st.Path, Mode: e.Mode.String(), Waiting: waiting, Session: e.Session, Who: who[e.Session]})
		}
		for _, e := range n.Holders {
			if !pathlock.Compatible(e.Mode, st.Mode) {
				add(e, false)
			}
		}
		for _, e := range n.Queue {
			add(e, true)
		}
	}
	return out
}

// acquire tries the request without waiting; if it would wait, it tells waiting
// (with the entries in the way) before it waits.
func (t TreeLocker) acquire(ctx context.Context, read, write []string) (*treelock.Held, error) {
	r := treelock.Request{Read: read, Write: write}
	if t.Waiting == nil || t.Store == nil {
		return t.M.Acquire(ctx, r)
	}
	h, err := t.M.TryAcquire(ctx, r)
	if err == nil || !errors.Is(err, treelock.ErrNotAcquired) || ctx.Err() != nil {
		return h, err
	}
	t.Waiting(Wait{Read: slices.Clone(read), Write: slices.Clone(write), Holders: TreeHolders(ctx, t.Store, read, write)})
	return t.M.Acquire(ctx, r)
}
