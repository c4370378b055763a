// Package fsstore is an objstore backend on a local directory: the directory is the
// bucket, and the key "a/b.txt" is the file <root>/a/b.txt, so people can browse
// it and other tools can read it.
//
// # Guarantees
//
//   - Conditional writes (if-absent, if-match, on Put, Copy, Delete and multipart
//     completion) are atomic across goroutines and across OS processes sharing the
//     directory: the check and the rename run under a per-key flock(2) stripe.
//   - Writes are crash-safe: content goes to a temporary file under .cairn/tmp,
//     is fsynced, then renamed into place, and the directory is fsynced. A reader
//     sees the old object or the new one, never a mix.
//   - ETags are the hex MD5 of the content, as on S3 (multipart: S3's composite
//     form). They are kept in a sidecar under .cairn/meta that names the file's
//     inode, size and mtime; a file written by another tool is detected by the
//     mismatch and its ETag computed from its bytes, so conditions stay correct
//     even then. A crash between the sidecar and the data rename leaves the
//     sidecar describing both the old and the new file, so either is labelled
//     correctly.
//   - No operation touches a path outside the root, whatever the key and
//     whatever symbolic links the tree holds: the Backend itself refuses a key
//     that is not a clean relative path (empty, absolute, with an empty, "." or
//     ".." segment, or NUL) with objstore.ErrInvalidKey, before and apart from
//     objstore's portable key rules; and every path is resolved through
//     os.Root, which follows a symbolic link only while it stays inside the
//     root, also when a folder is swapped for a link mid-operation. A key whose
//     path leads out through a link is objstore.ErrInvalidKey.
//   - Temporary data of a dead writer does not stay: a writer holds a
//     flock(2) on each of its temporary files (.cairn/tmp) from the moment it
//     creates it until it is renamed into place or removed, and on the lock
//     file of each multipart upload (.cairn/uploads/ID/lock) it created or
//     used, until it completes or aborts it or closes the Backend. The kernel
//     drops these locks when the process dies, kill -9 included. RemoveStale
//     (run by Open without waiting, and by 'cairn fs recover') removes every
//     temporary file and upload whose lock no live process holds — never one
//     in use, however slow: a creation and its lock are taken under a shared
//     lock of .cairn/locks/temp-gate, and RemoveStale scans under the
//     exclusive one, so it never sees a file its writer has not locked yet.
//     Temporary files and uploads of an older cairn (without these locks) are
//     removed only once 24 hours old.
//
// # Limits
//
//   - The path segment ".cairn" is reserved for the store's own bookkeeping, at
//     any depth: a directory store nested in another (cairn put creates one in
//     a file's directory when no ancestor holds .cairn/) keeps its own there,
//     and the outer store neither lists nor moves it.
//   - A key cannot be both an object and a folder ("a/b" and "a/b/c"): the second
//     write fails with objstore.ErrInvalidKey, as MinIO's filesystem mode does.
//   - Each key segment must fit a file name (255 bytes on most filesystems).
//   - Symbolic links and other non-regular files under the root are not listed.
//   - Unix only (flock). On network filesystems flock may not be enforced between
//     machines: share an fs store only between processes on one machine.
package fsstore

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"iter"
	"maps"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-s3/cairn/objstore"
)

const (
	internalDir = ".cairn"
	tmpDir      = internalDir + "/tmp"
	metaDir     = internalDir + "/meta"
	lockDir     = internalDir + "/locks"
	uploadDir   = internalDir + "/uploads"
	stripes     = 256
)

// Options configure a Backend. A nil *Options means all defaults.
type Options struct {
	// NoSync skips fsync. Only for scratch data: a crash may then lose
	// acknowledged writes. Default: false (every write is durable when it returns).
	NoSync bool
	// NoCreate makes Open and OpenBackend fail when the directory does not exist. Default: false
	// (the directory is created).
	NoCreate bool
}

// Backend is an objstore.Backend on a local directory.
type Backend struct {
	dir  string
	root *os.Root
	opts Options

	locks [stripes]struct {
		mu sync.Mutex
		f  *os.File
	}

	// gate is held shared (once per process, counted) while a temporary
	// file or upload is created and locked; RemoveStale holds it exclusive.
	gate struct {
		mu sync.Mutex
		n  int
		f  *os.File
	}
	// held are the lock files of the uploads this Backend uses (by id).
	held struct {
		mu  sync.Mutex
		ids map[string]*os.File
	}
}

const (
	gateFile = lockDir + "/temp-gate"
	// tempPrefix names the temporary files whose writers lock them.
	tempPrefix = "w-"
	// uploadLock is the file an upload's users lock.
	uploadLock = "lock"
	// legacyAge is the age past which temporary data without a lock (an
	// older cairn's) counts as abandoned.
	legacyAge = 24 * time.Hour
)

func init() {
	objstore.Register("file", func(_ context.Context, u *url.URL) (objstore.Backend, error) {
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("%w: file URLs name a local directory: file:///abs/dir (got host %q)", objstore.ErrInvalidURL, u.Host)
		}
		if u.Path == "" {
			return nil, fmt.Errorf("%w: file URL without a directory: use file:///abs/dir", objstore.ErrInvalidURL)
		}
		q := u.Query()
		var o Options
		for k := range q {
			switch k {
			case "nosync", "nocreate":
				v, err := strconv.ParseBool(q.Get(k))
				if err != nil {
					return nil, fmt.Errorf("%w: %s=%q is not a boolean", objstore.ErrInvalidURL, k, q.Get(k))
				}
				if k == "nosync" {
					o.NoSync = v
				} else {
					o.NoCreate = v
				}
			default:
				return nil, fmt.Errorf("%w: unknown file URL parameter %q (known: nosync, nocreate)", objstore.ErrInvalidURL, k)
			}
		}
		return OpenBackend(u.Path, &o)
	})
}

// OpenBackend opens (and by default creates) the directory dir as a
// Backend, for wrappers and the backend's own methods; Open is the Store
// over it.
func OpenBackend(dir string, opts *Options) (*Backend, error) {
	b := &Backend{dir: dir}
	if opts != nil {
		b.opts = *opts
	}
	if !b.opts.NoCreate {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("fs store: creating %s: %w", dir, err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("fs store %s: %w: the directory does not exist; create it or drop nocreate", dir, objstore.ErrBucketNotFound)
		}
		return nil, fmt.Errorf("fs store: opening %s: %w", dir, err)
	}
	b.root = root
	for _, d := range []string{tmpDir, metaDir, lockDir, uploadDir} {
		if err := root.MkdirAll(d, 0o755); err != nil {
			root.Close()
			return nil, fmt.Errorf("fs store: creating %s/%s: %w", dir, d, err)
		}
	}
	// Temporary data of writers that died (best effort; never waits).
	_, _ = b.removeStale(false)
	return b, nil
}

// enterGate holds the gate shared while a temporary file or upload is
// created and locked.
func (b *Backend) enterGate() error {
	b.gate.mu.Lock()
	defer b.gate.mu.Unlock()
	if b.gate.n == 0 {
		if b.gate.f == nil {
			f, err := b.root.OpenFile(gateFile, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return fmt.Errorf("opening %s: %w", gateFile, err)
			}
			b.gate.f = f
		}
		if err := flockShared(b.gate.f); err != nil {
			return fmt.Errorf("locking %s: %w", gateFile, err)
		}
	}
	b.gate.n++
	return nil
}

func (b *Backend) leaveGate() {
	b.gate.mu.Lock()
	defer b.gate.mu.Unlock()
	if b.gate.n--; b.gate.n == 0 {
		_ = funlock(b.gate.f)
	}
}

// Stale is what RemoveStale removed.
type Stale struct {
	Files int   `json:"files"` // temporary files, and the files of multipart uploads
	Bytes int64 `json:"bytes"`
}

// RemoveStale removes the temporary files and multipart uploads that no live
// process holds (see the package documentation): those of writers that
// died. It waits for writers that are creating one right now.
func (b *Backend) RemoveStale() (Stale, error) { return b.removeStale(true) }

func (b *Backend) removeStale(wait bool) (Stale, error) {
	var st Stale
	gate, err := b.root.OpenFile(gateFile, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return st, fmt.Errorf("fs store: opening %s: %w", gateFile, err)
	}
	defer gate.Close() // and its lock
	if wait {
		err = flock(gate)
	} else {
		var ok bool
		if ok, err = flockTry(gate, false); err == nil && !ok {
			return st, nil // a writer is creating a temporary file: next time
		}
	}
	if err != nil {
		return st, fmt.Errorf("fs store: locking %s: %w", gateFile, err)
	}
	old := time.Now().Add(-legacyAge)
	ents, err := fs.ReadDir(b.root.FS(), tmpDir)
	if err != nil {
		return st, fmt.Errorf("fs store: reading %s: %w", tmpDir, err)
	}
	for _, de := range ents {
		name := tmpDir + "/" + de.Name()
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if !strings.HasPrefix(de.Name(), tempPrefix) {
			if fi.ModTime().Before(old) && b.root.Remove(name) == nil {
				st.Files++
				st.Bytes += fi.Size()
			}
			continue
		}
		if free, err := b.unheld(name); err == nil && free != nil {
			if b.root.Remove(name) == nil {
				st.Files++
				st.Bytes += fi.Size()
			}
			free.Close()
		}
	}
	ents, err = fs.ReadDir(b.root.FS(), uploadDir)
	if err != nil {
		return st, fmt.Errorf("fs store: reading %s: %w", uploadDir, err)
	}
	for _, de := range ents {
		dir := uploadDir + "/" + de.Name()
		if !de.IsDir() {
			continue
		}
		free, err := b.unheld(dir + "/" + uploadLock)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// An older cairn's upload: judged by its age.
			fi, err := de.Info()
			if err != nil || !fi.ModTime().Before(old) {
				continue
			}
		case err != nil || free == nil:
			continue // held by a live process
		}
		n, size := b.treeSize(dir)
		if b.root.RemoveAll(dir) == nil {
			st.Files += n
			st.Bytes += size
		}
		if free != nil {
			free.Close()
		}
	}
	return st, nil
}

// unheld opens name and locks it exclusively if no one holds a lock on it:
// it returns the locked file (close it after removing), or nil if a live
// process holds it.
func (b *Backend) unheld(name string) (*os.File, error) {
	f, err := b.root.Open(name)
	if err != nil {
		return nil, err
	}
	ok, err := flockTry(f, false)
	if err != nil || !ok {
		f.Close()
		return nil, err
	}
	return f, nil
}

// treeSize counts the regular files under dir and their bytes.
func (b *Backend) treeSize(dir string) (int, int64) {
	n, size := 0, int64(0)
	_ = fs.WalkDir(b.root.FS(), dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return n, size
}

// holdUpload locks (shared) the lock file of upload id for as long as this
// Backend uses it, so that RemoveStale leaves it alone. An upload of an
// older cairn has no lock file and is not held.
func (b *Backend) holdUpload(id string, create bool) error {
	b.held.mu.Lock()
	defer b.held.mu.Unlock()
	if _, ok := b.held.ids[id]; ok {
		return nil
	}
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := b.root.OpenFile(uploadPath(id)+"/"+uploadLock, flags, 0o644)
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil
	}
	if err != nil {
		return err
	}
	if err := flockShared(f); err != nil {
		f.Close()
		return err
	}
	if b.held.ids == nil {
		b.held.ids = map[string]*os.File{}
	}
	b.held.ids[id] = f
	return nil
}

// releaseUpload drops this Backend's hold of upload id.
func (b *Backend) releaseUpload(id string) {
	b.held.mu.Lock()
	defer b.held.mu.Unlock()
	if f, ok := b.held.ids[id]; ok {
		f.Close()
		delete(b.held.ids, id)
	}
}

// Open opens (and by default creates) the directory dir and returns a Store
// over it.
func Open(dir string, opts *Options) (*objstore.Store, error) {
	b, err := OpenBackend(dir, opts)
	if err != nil {
		return nil, err
	}
	return objstore.New(b, nil), nil
}

func (b *Backend) String() string { return "file://" + b.dir }

// Dir is the directory holding the objects.
func (b *Backend) Dir() string { return b.dir }

// Close releases the directory and lock files.
func (b *Backend) Close() error {
	for i := range b.locks {
		l := &b.locks[i]
		l.mu.Lock()
		if l.f != nil {
			l.f.Close()
			l.f = nil
		}
		l.mu.Unlock()
	}
	b.held.mu.Lock()
	for id, f := range b.held.ids {
		f.Close() // its upload is abandoned: the next RemoveStale removes it
		delete(b.held.ids, id)
	}
	b.held.mu.Unlock()
	b.gate.mu.Lock()
	if b.gate.f != nil {
		b.gate.f.Close()
		b.gate.f, b.gate.n = nil, 0
	}
	b.gate.mu.Unlock()
	return b.root.Close()
}

// Capabilities: the fs backend enforces every condition itself.
func (b *Backend) Capabilities() (objstore.Capabilities, bool) {
	return objstore.Capabilities{PutIfAbsent: true, PutIfMatch: true, DeleteIfMatch: true, CopyIfAbsent: true,
		CopyIfMatch: true, MultipartIfAbsent: true, MultipartIfMatch: true}, true
}

// MinPartSize is 1 byte.
func (b *Backend) MinPartSize() int64 { return 1 }

// checkKey refuses, at the lowest layer, every key that is not a clean
// relative path (objstore.Store refuses them first; this holds for callers of
// the Backend too): empty, absolute, with an empty, "." or ".." segment, or
// with NUL. os.Root then confines what is left to the root, symbolic links
// included.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty", objstore.ErrInvalidKey)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("%w: the key starts with \"/\"; the fs store keeps keys relative to its root", objstore.ErrInvalidKey)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: the key holds NUL, which no file name can", objstore.ErrInvalidKey)
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w: the key has an empty segment (\"//\" or a trailing \"/\")", objstore.ErrInvalidKey)
		case ".", "..":
			return fmt.Errorf("%w: the key has a %q segment; the fs store never resolves one (it would name another file, or one outside its root)", objstore.ErrInvalidKey, seg)
		}
		if seg == internalDir {
			return fmt.Errorf("%w: %q is reserved for the fs store's bookkeeping, at any depth (a directory store nested in another keeps its own there)", objstore.ErrInvalidKey, internalDir)
		}
		if len(seg) > 255 {
			return fmt.Errorf("%w: segment %.20q… is %d bytes; the fs store keeps segments as file names (255 bytes at most)", objstore.ErrInvalidKey, seg, len(seg))
		}
	}
	return nil
}

// lock takes the stripe lock of key: a mutex between goroutines and flock(2)
// between processes.
func (b *Backend) lock(key string) (func(), error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	l := &b.locks[h.Sum32()%stripes]
	l.mu.Lock()
	if l.f == nil {
		f, err := b.root.OpenFile(fmt.Sprintf("%s/%02x", lockDir, h.Sum32()%stripes), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("opening lock file: %w", err)
		}
		l.f = f
	}
	if err := flock(l.f); err != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("locking: %w", err)
	}
	return func() {
		_ = funlock(l.f)
		l.mu.Unlock()
	}, nil
}

// entry describes one version of a file, recognised by inode, size and mtime.
type entry struct {
	Ino         uint64            `json:"ino"`
	Size        int64             `json:"size"`
	MtimeNs     int64             `json:"mtime_ns"`
	ETag        string            `json:"etag"`
	ContentType string            `json:"content_type,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

type sidecar struct {
	Key     string  `json:"key"`
	Entries []entry `json:"entries"` // newest first; at most the new and the previous
}

func metaPath(key string) string {
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])
	return metaDir + "/" + h[:2] + "/" + h
}

func (e entry) matches(fi os.FileInfo) bool {
	return e.Ino == inode(fi) && e.Size == fi.Size() && e.MtimeNs == fi.ModTime().UnixNano()
}

func (b *Backend) readSidecar(key string) sidecar {
	var sc sidecar
	data, err := b.root.ReadFile(metaPath(key))
	if err != nil || json.Unmarshal(data, &sc) != nil || sc.Key != key {
		return sidecar{}
	}
	return sc
}

// describe returns the entry of the file fi (opened as f, or at key if f is nil).
func (b *Backend) describe(key string, fi os.FileInfo, f *os.File) (entry, error) {
	for _, e := range b.readSidecar(key).Entries {
		if e.matches(fi) {
			return e, nil
		}
	}
	// Written by another tool (or the sidecar was lost): compute the ETag.
	e := entry{Ino: inode(fi), Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano()}
	var r io.Reader = f
	if f == nil {
		ff, err := b.root.Open(key)
		if err != nil {
			return e, b.mapErr(key, err)
		}
		defer ff.Close()
		r = ff
	} else {
		defer f.Seek(0, io.SeekStart)
		r = io.NewSectionReader(f, 0, fi.Size())
	}
	h := md5.New()
	if _, err := io.Copy(h, r); err != nil {
		return e, err
	}
	e.ETag = hex.EncodeToString(h.Sum(nil))
	return e, nil
}

func info(key string, fi os.FileInfo, e entry) objstore.Info {
	ct := e.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	return objstore.Info{Key: key, Size: fi.Size(), ETag: e.ETag, LastModified: fi.ModTime().UTC(),
		ContentType: ct, Metadata: maps.Clone(e.Metadata)}
}

// mapErr turns filesystem errors into objstore sentinels.
func (b *Backend) mapErr(key string, err error) error {
	switch {
	case err == nil:
		return nil
	case unwritable(err) != "":
		return b.refused(err)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: no object at this key", objstore.ErrNotFound)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: a segment is too long for a file name: %v", objstore.ErrInvalidKey, err)
	case escapes(err):
		return fmt.Errorf("%w: its path leads out of the store's root through a symbolic link, which the fs store never follows: %v", objstore.ErrInvalidKey, err)
	}
	return err
}

// escapes reports os.Root's refusal of a path that leaves the root (through
// a symbolic link: keys with ".." never get there). os does not export the
// error, only its text.
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// unwritable says what to do about an error of a file system that takes no
// more writes (full, over quota, read-only), "" for any other error.
func unwritable(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return "the disk holding %s is full: free space and retry"
	case errors.Is(err, syscall.EDQUOT):
		return "the disk quota for %s is used up: free space or raise the quota, and retry"
	case errors.Is(err, syscall.EROFS):
		return "%s is on a read-only file system: remount it read-write or use another directory"
	}
	return ""
}

// refused maps an error of a file system that takes no more writes to
// objstore.ErrUnwritable, saying what to do; it returns any other error as
// it is. Every writing method passes its error through it (its callers'
// retry loops give up at once on ErrUnwritable, rather than retrying a full
// disk for seconds).
func (b *Backend) refused(err error) error {
	what := unwritable(err)
	if what == "" || errors.Is(err, objstore.ErrUnwritable) {
		return err
	}
	return fmt.Errorf("%w: "+what+" (%w)", objstore.ErrUnwritable, b.dir, err)
}

// stat returns the current object at key, or exists=false.
func (b *Backend) stat(key string) (os.FileInfo, bool, error) {
	fi, err := b.root.Lstat(key)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, false, nil
		}
		return nil, false, b.mapErr(key, err)
	}
	if !fi.Mode().IsRegular() {
		return fi, false, nil // a folder, or something that is not an object
	}
	return fi, true, nil
}

// Get implements objstore.Backend.
func (b *Backend) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	if err := checkKey(key); err != nil {
		return nil, objstore.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, objstore.Info{}, err
	}
	f, err := b.root.Open(key)
	if err != nil {
		return nil, objstore.Info{}, b.mapErr(key, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fs.ErrNotExist
	}
	var e entry
	if err == nil {
		e, err = b.describe(key, fi, f)
	}
	if err != nil {
		f.Close()
		return nil, objstore.Info{}, b.mapErr(key, err)
	}
	return f, info(key, fi, e), nil
}

// Head implements objstore.Backend.
func (b *Backend) Head(ctx context.Context, key string) (objstore.Info, error) {
	rc, i, err := b.Get(ctx, key)
	if err != nil {
		return objstore.Info{}, err
	}
	rc.Close()
	return i, nil
}

// tempFile is a fully written, synced file under .cairn/tmp, still open and
// locked by its writer (see RemoveStale): close it once it is renamed into
// place or removed.
type tempFile struct {
	name string
	fi   os.FileInfo
	etag string
	f    *os.File
}

func (t tempFile) close() { t.f.Close() }

func randomName() string {
	var r [12]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// writeTemp copies srcs into a new temporary file, fsyncs it and returns it. The
// ETag is the MD5 of the content, or with multipart S3's form over the parts.
func (b *Backend) writeTemp(multipart bool, srcs ...io.Reader) (tempFile, error) {
	name := tmpDir + "/" + tempPrefix + randomName()
	if err := b.enterGate(); err != nil {
		return tempFile{}, fmt.Errorf("creating a temporary file: %w", err)
	}
	f, err := b.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		if err = flockShared(f); err != nil {
			f.Close()
			_ = b.root.Remove(name)
		}
	}
	b.leaveGate()
	if err != nil {
		return tempFile{}, fmt.Errorf("creating a temporary file: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = b.root.Remove(name)
		}
	}()
	var sums []byte
	whole := md5.New()
	for _, src := range srcs {
		h := md5.New()
		w := io.MultiWriter(f, h, whole)
		if _, err := io.Copy(w, src); err != nil {
			return tempFile{}, fmt.Errorf("writing: %w", err)
		}
		sums = h.Sum(sums)
	}
	if !b.opts.NoSync {
		if err := f.Sync(); err != nil {
			return tempFile{}, fmt.Errorf("syncing: %w", err)
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return tempFile{}, err
	}
	ok = true
	etag := hex.EncodeToString(whole.Sum(nil))
	if multipart {
		s := md5.Sum(sums)
		etag = fmt.Sprintf("%s-%d", hex.EncodeToString(s[:]), len(srcs))
	}
	return tempFile{name: name, fi: fi, etag: etag, f: f}, nil
}

func (b *Backend) syncDir(dir string) {
	if b.opts.NoSync {
		return
	}
	if dir == "" {
		dir = "."
	}
	if d, err := b.root.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// check tests cond against the object at key; the caller holds the key's lock.
func (b *Backend) check(key string, cond objstore.Condition) (cur *entry, err error) {
	fi, exists, err := b.stat(key)
	if err != nil {
		return nil, err
	}
	if exists {
		e, err := b.describe(key, fi, nil)
		if err != nil {
			return nil, b.mapErr(key, err)
		}
		cur = &e
	}
	switch {
	case cond.Absent && cur != nil:
		return cur, fmt.Errorf("%w: an object already exists at this key", objstore.ErrPreconditionFailed)
	case cond.Match != "" && cur == nil:
		return nil, fmt.Errorf("%w: %w: if-match on a missing key", objstore.ErrPreconditionFailed, objstore.ErrNotFound)
	case cond.Match != "" && cur.ETag != cond.Match:
		return cur, fmt.Errorf("%w: the object's ETag is %s, not %s", objstore.ErrPreconditionFailed, cur.ETag, cond.Match)
	}
	return cur, nil
}

// commit renames a temp file to key under cond. It always consumes tmp.
func (b *Backend) commit(ctx context.Context, key string, tmp tempFile, opts objstore.PutOptions) (objstore.Info, error) {
	defer tmp.close()
	defer b.root.Remove(tmp.name) // no-op after a successful rename
	if err := ctx.Err(); err != nil {
		return objstore.Info{}, err
	}
	unlock, err := b.lock(key)
	if err != nil {
		return objstore.Info{}, err
	}
	defer unlock()
	cur, err := b.check(key, opts.If)
	if err != nil {
		return objstore.Info{}, err
	}
	if err := b.conflicts(key); err != nil {
		return objstore.Info{}, err
	}
	ne := entry{Ino: inode(tmp.fi), Size: tmp.fi.Size(), MtimeNs: tmp.fi.ModTime().UnixNano(), ETag: tmp.etag,
		ContentType: opts.ContentType, Metadata: opts.Metadata}
	sc := sidecar{Key: key, Entries: []entry{ne}}
	if cur != nil {
		sc.Entries = append(sc.Entries, *cur)
	}
	if err := b.writeSidecar(key, sc); err != nil {
		return objstore.Info{}, err
	}
	dir := path.Dir(key)
	for attempt := 0; ; attempt++ {
		// A concurrent Delete of another key removes the folders it leaves
		// empty: one of ours can vanish while MkdirAll creates the ones below
		// it, or before the rename. Both fail with ErrNotExist; start again.
		// So does one that vanishes between MkdirAll finding it made (EEXIST)
		// and looking at what it is: os.Root's MkdirAll then answers EEXIST,
		// which is no conflict if nothing in the key's path is an object.
		err := error(nil)
		if dir != "." {
			err = b.root.MkdirAll(dir, 0o755)
		}
		if err == nil {
			err = b.root.Rename(tmp.name, key)
		}
		if err == nil {
			break
		}
		vanished := errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist) && b.conflicts(key) == nil
		if vanished && attempt < 100 {
			continue
		}
		return objstore.Info{}, b.conflictErr(key, err)
	}
	b.syncDir(dir)
	return info(key, tmp.fi, ne), nil
}

func (b *Backend) writeSidecar(key string, sc sidecar) error {
	data, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	mp := metaPath(key)
	// Its folder can vanish under a concurrent Delete as the data's can (see
	// put): made again.
	for attempt := 0; ; attempt++ {
		err := b.root.MkdirAll(path.Dir(mp), 0o755)
		if err == nil {
			break
		}
		if !(errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist)) || attempt == 100 {
			return err
		}
	}
	tmp, err := b.writeTemp(false, strings.NewReader(string(data)))
	if err != nil {
		return fmt.Errorf("writing metadata: %w", err)
	}
	defer tmp.close()
	if err := b.root.Rename(tmp.name, mp); err != nil {
		_ = b.root.Remove(tmp.name)
		return fmt.Errorf("writing metadata: %w", err)
	}
	return nil
}

// conflicts reports a key that would have to be both an object and a folder.
func (b *Backend) conflicts(key string) error {
	fi, err := b.root.Lstat(key)
	if err == nil && fi.IsDir() {
		return fmt.Errorf("%w: %q is a folder (other keys start with %q); the fs store cannot hold an object there too",
			objstore.ErrInvalidKey, key, key+"/")
	}
	for d := path.Dir(key); d != "."; d = path.Dir(d) {
		fi, err := b.root.Lstat(d)
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %q is an object, so the fs store cannot make it a folder for %q", objstore.ErrInvalidKey, d, key)
		}
		break // an existing directory: everything above it is a directory too
	}
	return nil
}

func (b *Backend) conflictErr(key string, err error) error {
	if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
		if cerr := b.conflicts(key); cerr != nil {
			return cerr
		}
		return fmt.Errorf("%w: the key is both an object and a folder: %v", objstore.ErrInvalidKey, err)
	}
	return b.mapErr(key, err)
}

// Put implements objstore.Backend.
func (b *Backend) Put(ctx context.Context, key string, body io.Reader, _ int64, opts objstore.PutOptions) (_ objstore.Info, err error) {
	defer func() { err = b.refused(err) }()
	if err := checkKey(key); err != nil {
		return objstore.Info{}, err
	}
	tmp, err := b.writeTemp(false, body)
	if err != nil {
		return objstore.Info{}, err
	}
	return b.commit(ctx, key, tmp, opts)
}

// Delete implements objstore.Backend.
func (b *Backend) Delete(ctx context.Context, key string, cond objstore.Condition) (err error) {
	defer func() { err = b.refused(err) }()
	if err := checkKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := b.lock(key)
	if err != nil {
		return err
	}
	defer unlock()
	if _, exists, err := b.stat(key); err != nil {
		return err
	} else if !exists {
		if cond.Match != "" {
			return fmt.Errorf("%w: no object at this key", objstore.ErrNotFound)
		}
		return nil
	}
	if _, err := b.check(key, cond); err != nil {
		return err
	}
	if err := b.root.Remove(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return b.mapErr(key, err)
	}
	_ = b.root.Remove(metaPath(key))
	dir := path.Dir(key)
	b.syncDir(dir)
	// Remove folders left empty, as S3 has no empty folders either.
	for d := dir; d != "."; d = path.Dir(d) {
		if b.root.Remove(d) != nil {
			break
		}
	}
	return nil
}

// List implements objstore.Backend.
func (b *Backend) List(ctx context.Context, prefix, cursor string, opts objstore.ListOptions) (objstore.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ListPage{}, err
	}
	return objstore.PageFromScanner(b.scan, prefix, cursor, opts)
}

func (b *Backend) scan(prefix, after, skip string) iter.Seq2[objstore.Info, error] {
	return func(yield func(objstore.Info, error) bool) {
		b.walk("", prefix, after, skip, yield)
	}
}

// walk visits the folder dir ("" for the root) in key order. A sub-folder sorts
// as its name followed by "/", which makes the depth-first order equal to the
// UTF-8 byte order of the keys. It returns false when yield asked to stop.
func (b *Backend) walk(dir, prefix, after, skip string, yield func(objstore.Info, error) bool) bool {
	name := dir
	if name == "" {
		name = "."
	}
	f, err := b.root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || escapes(err) {
			// Removed while we walked, or replaced by a file or by a
			// symbolic link leading out of the root: no folder of objects
			// (links are never objects, as below).
			return true
		}
		return yield(objstore.Info{}, err)
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return yield(objstore.Info{}, err)
	}
	type item struct {
		key string // full key, with a trailing "/" for folders
		ent fs.DirEntry
	}
	items := make([]item, 0, len(ents))
	for _, e := range ents {
		k := dir + e.Name()
		switch {
		case e.IsDir():
			k += "/"
		case !e.Type().IsRegular():
			continue // symlinks, sockets, …: not objects
		}
		if e.Name() == internalDir {
			continue // this store's bookkeeping, or a nested store's: never objects
		}
		items = append(items, item{k, e})
	}
	slices.SortFunc(items, func(x, y item) int { return strings.Compare(x.key, y.key) })
	for _, it := range items {
		k := it.key
		if !strings.HasPrefix(k, prefix) && !strings.HasPrefix(prefix, k) {
			continue // outside the prefix, and no key below it is inside
		}
		if skip != "" && strings.HasPrefix(k, skip) {
			continue
		}
		if it.ent.IsDir() {
			// Skip folders whose every key is <= after.
			if after >= k && !strings.HasPrefix(after, k) {
				continue
			}
			if !b.walk(k, prefix, after, skip, yield) {
				return false
			}
			continue
		}
		if k <= after || !strings.HasPrefix(k, prefix) {
			continue
		}
		fi, err := it.ent.Info()
		if err != nil {
			continue // removed while we walked
		}
		e, err := b.describe(k, fi, nil)
		if err != nil {
			if errors.Is(b.mapErr(k, err), objstore.ErrNotFound) {
				continue
			}
			if !yield(objstore.Info{}, err) {
				return false
			}
			continue
		}
		if !yield(objstore.Info{Key: k, Size: fi.Size(), ETag: e.ETag, LastModified: fi.ModTime().UTC()}, nil) {
			return false
		}
	}
	return true
}

// Copy implements objstore.Backend.
func (b *Backend) Copy(ctx context.Context, src, dst string, cond objstore.Condition) (_ objstore.Info, err error) {
	defer func() { err = b.refused(err) }()
	if err := checkKey(dst); err != nil {
		return objstore.Info{}, err
	}
	rc, si, err := b.Get(ctx, src)
	if err != nil {
		return objstore.Info{}, fmt.Errorf("copy source: %w", err)
	}
	defer rc.Close()
	tmp, err := b.writeTemp(false, rc)
	if err != nil {
		return objstore.Info{}, err
	}
	return b.commit(ctx, dst, tmp, objstore.PutOptions{If: cond, ContentType: si.ContentType, Metadata: si.Metadata})
}

type uploadInfo struct {
	Key         string            `json:"key"`
	ContentType string            `json:"content_type"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Created     time.Time         `json:"created"`
}

func uploadPath(id string) string { return uploadDir + "/" + id }

// CreateMultipart implements objstore.Backend.
func (b *Backend) CreateMultipart(ctx context.Context, key string, opts objstore.PutOptions) (_ string, err error) {
	defer func() { err = b.refused(err) }()
	if err := checkKey(key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	id := randomName()
	if err := b.enterGate(); err != nil {
		return "", err
	}
	err = b.root.Mkdir(uploadPath(id), 0o755)
	if err == nil {
		err = b.holdUpload(id, true)
	}
	b.leaveGate()
	if err != nil {
		_ = b.root.RemoveAll(uploadPath(id))
		return "", err
	}
	data, _ := json.Marshal(uploadInfo{Key: key, ContentType: opts.ContentType, Metadata: opts.Metadata, Created: time.Now().UTC()})
	if err := b.root.WriteFile(uploadPath(id)+"/upload.json", data, 0o644); err != nil {
		return "", err
	}
	return id, nil
}

func (b *Backend) upload(key, id string) (uploadInfo, error) {
	var u uploadInfo
	if strings.ContainsAny(id, "/.") || id == "" {
		return u, fmt.Errorf("%w: no multipart upload %q", objstore.ErrNotFound, id)
	}
	data, err := b.root.ReadFile(uploadPath(id) + "/upload.json")
	if err != nil || json.Unmarshal(data, &u) != nil || u.Key != key {
		return u, fmt.Errorf("%w: no multipart upload %q for this key", objstore.ErrNotFound, id)
	}
	return u, nil
}

func partPath(id string, n int) string { return fmt.Sprintf("%s/part-%05d", uploadPath(id), n) }

// UploadPart implements objstore.Backend.
func (b *Backend) UploadPart(ctx context.Context, key, id string, number int, body io.Reader, _ int64) (_ objstore.Part, err error) {
	defer func() { err = b.refused(err) }()
	if _, err := b.upload(key, id); err != nil {
		return objstore.Part{}, err
	}
	if number < 1 || number > 10000 {
		return objstore.Part{}, fmt.Errorf("%w: part number %d is outside 1..10000", objstore.ErrNotSupported, number)
	}
	if err := b.holdUpload(id, false); err != nil {
		return objstore.Part{}, b.mapErr(key, err)
	}
	tmp, err := b.writeTemp(false, body)
	if err != nil {
		return objstore.Part{}, err
	}
	defer tmp.close()
	if err := ctx.Err(); err != nil {
		_ = b.root.Remove(tmp.name)
		return objstore.Part{}, err
	}
	if err := b.root.Rename(tmp.name, partPath(id, number)); err != nil {
		_ = b.root.Remove(tmp.name)
		return objstore.Part{}, b.mapErr(key, err) // the upload was aborted meanwhile
	}
	return objstore.Part{Number: number, ETag: tmp.etag, Size: tmp.fi.Size()}, nil
}

// CompleteMultipart implements objstore.Backend.
func (b *Backend) CompleteMultipart(ctx context.Context, key, id string, parts []objstore.Part, cond objstore.Condition) (_ objstore.Info, err error) {
	defer func() { err = b.refused(err) }()
	u, err := b.upload(key, id)
	if err != nil {
		return objstore.Info{}, err
	}
	if err := b.holdUpload(id, false); err != nil {
		return objstore.Info{}, b.mapErr(key, err)
	}
	var readers []io.Reader
	for i, p := range parts {
		if p.Number != i+1 {
			return objstore.Info{}, fmt.Errorf("%w: parts must be numbered 1..N in order (got %d at position %d)", objstore.ErrNotSupported, p.Number, i+1)
		}
		f, err := b.root.Open(partPath(id, p.Number))
		if err != nil {
			return objstore.Info{}, fmt.Errorf("%w: part %d was not uploaded", objstore.ErrNotFound, p.Number)
		}
		defer f.Close()
		readers = append(readers, f)
	}
	if len(readers) == 0 {
		return objstore.Info{}, fmt.Errorf("%w: a multipart upload needs at least one part", objstore.ErrNotSupported)
	}
	tmp, err := b.writeTemp(true, readers...)
	if err != nil {
		return objstore.Info{}, err
	}
	inf, err := b.commit(ctx, key, tmp, objstore.PutOptions{If: cond, ContentType: u.ContentType, Metadata: u.Metadata})
	if err != nil {
		return objstore.Info{}, err
	}
	_ = b.root.RemoveAll(uploadPath(id))
	b.releaseUpload(id)
	return inf, nil
}

// AbortMultipart implements objstore.Backend.
func (b *Backend) AbortMultipart(ctx context.Context, key, id string) error {
	if _, err := b.upload(key, id); err != nil {
		return err
	}
	defer b.releaseUpload(id)
	return b.root.RemoveAll(uploadPath(id))
}

// Uploads returns the number of multipart uploads in progress (for tests).
func (b *Backend) Uploads() int {
	ents, _ := fs.ReadDir(b.root.FS(), uploadDir)
	return len(ents)
}
