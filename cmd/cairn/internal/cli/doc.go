package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairn-s3/cairn/docstore"
	"github.com/cairn-s3/cairn/fence"
	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/objstore"
)

func docCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doc",
		Short: "Read, create and update shared JSON documents safely under concurrent writers",
		Long: `doc reads and writes JSON documents (a registry, a manifest, a state file)
with compare-and-swap: concurrent updates are never lost, and a write whose
response was lost is resolved by reading back, never applied twice.

Documents are stored in an envelope that carries a revision and writer nonces;
'doc get' prints just the value. URLs name one object: s3://bucket/path/key.json,
file:///dir/key.json (the directory store is the nearest ancestor holding
.cairn/), mem://name/key; or --store URL --key KEY, the key taken byte for
byte (never parsed as a URL: use it for a key from elsewhere, e.g. an event's
$CAIRN_KEY).`,
	}
	cmd.AddCommand(docGetCmd(e), docCreateCmd(e), docUpdateCmd(e))
	return cmd
}

func openDoc(cmd *cobra.Command, obj *objectFlags, urls []string) (*docstore.Store, string, error) {
	s, key, err := obj.open(cmd.Context(), urls)
	if err != nil {
		return nil, "", err // a bad URL or key exits 2
	}
	return docstore.New(s, nil), key, nil
}

type docOut struct {
	docstore.Meta
	Value json.RawMessage `json:"value,omitempty"`
	// ValueBase64 holds a value that is not JSON (a byte document), base64.
	ValueBase64 []byte `json:"value_base64,omitempty"`
	// FenceToken is a fenced document's mark (doc get only).
	FenceToken *int64 `json:"fence_token,omitempty"`
}

func (e *env) printDoc(m docstore.Meta, value []byte, showValue bool) error {
	if e.json {
		out := docOut{Meta: m}
		if showValue && json.Valid(value) {
			out.Value = value
		} else if showValue {
			out.ValueBase64 = value
		}
		return e.writeJSON(out)
	}
	if showValue {
		var buf bytes.Buffer
		if json.Indent(&buf, value, "", "  ") == nil {
			value = buf.Bytes()
		}
		_, err := fmt.Fprintln(e.stdout, string(value))
		return err
	}
	_, err := fmt.Fprintln(e.stdout, m.ETag)
	return err
}

func docGetCmd(e *env) *cobra.Command {
	var raw bool
	var obj objectFlags
	cmd := &cobra.Command{
		Use:   "get (URL | --store URL --key KEY)",
		Short: "Print a document's value (with --json: key, etag, rev, value and a fenced document's fence_token)",
		Long: `get prints a document's value. A fenced document (written by 'doc update
--fence-token') is stored as {"cairn_fence": N, "value": …}: get prints the
value, and --json adds "fence_token": N; --raw prints the stored form.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, key, err := openDoc(cmd, &obj, args)
			if err != nil {
				return err
			}
			defer d.Objects().Close()
			if raw {
				v, m, err := d.LoadBytes(cmd.Context(), key)
				if err != nil {
					return err
				}
				return e.printDoc(m, v, true)
			}
			// A byte or non-JSON document (docstore.CreateBytes, a plain upload) has no
			// wrapper: it is printed as stored.
			stored, m, err := d.LoadBytes(cmd.Context(), key)
			if err != nil {
				return err
			}
			v, tok, err := fence.Unwrap(stored)
			if err != nil {
				return fmt.Errorf("%s: %w (print the stored form with --raw)", safetext.Escape(key), err)
			}
			if e.json && tok >= 0 {
				return e.writeJSON(docOut{Meta: m, Value: v, FenceToken: &tok})
			}
			return e.printDoc(m, v, true)
		},
	}
	cmd.Flags().BoolVar(&raw, "raw", false, "print the value as stored (a fenced document's wrapper included)")
	obj.register(cmd)
	return cmd
}

func readInput(e *env, path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(e.stdin)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("reading %s: %v", path, err)
	}
	return data, nil
}

func docCreateCmd(e *env) *cobra.Command {
	var file string
	var obj objectFlags
	cmd := &cobra.Command{
		Use:   "create (URL | --store URL --key KEY) --file F",
		Short: "Create a document from a JSON file (- for stdin); exit 3 if it exists",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := obj.args(args); err != nil {
				return err
			}
			if file == "" {
				return usagef("--file is required (use - for stdin)")
			}
			data, err := readInput(e, file)
			if err != nil {
				return err
			}
			if !json.Valid(data) {
				return usagef("%s is not valid JSON", file)
			}
			if err := unfencedValue(data); err != nil {
				return err
			}
			d, key, err := openDoc(cmd, &obj, args)
			if err != nil {
				return err
			}
			defer d.Objects().Close()
			m, err := docstore.Typed[json.RawMessage](d).Create(cmd.Context(), key, json.RawMessage(bytes.TrimSpace(data)))
			if err != nil {
				return err
			}
			return e.printDoc(m, nil, false)
		},
	}
	nonEmptyVar(cmd.Flags(), &file, "file", "", "JSON file with the initial value (- for stdin)", "name a file, or - for stdin")
	obj.register(cmd)
	return cmd
}

func docUpdateCmd(e *env) *cobra.Command {
	var sets []string
	var merge, fenceToken string
	var create, unfenced bool
	var obj objectFlags
	cmd := &cobra.Command{
		Use:   "update (URL | --store URL --key KEY) (--set PATH=VALUE … | --merge F)",
		Short: "Update fields of a document with compare-and-swap; prints the new ETag",
		Long: `update applies --merge (a JSON merge patch, RFC 7386, from a file or - for
stdin) and then each --set (PATH is dot-separated object keys; VALUE is JSON,
or a string if it does not parse as JSON), redriving on concurrent writes.
Exit code 3 if the retry budget ran out under contention.

--fence-token N applies the update only if N is at least the highest fencing
token the document has recorded, and records N (exit 3 if a higher token has
updated it): give it "$CAIRN_FENCING_TOKEN" in a command run by 'cairn lock
run', 'cairn lock tree' or 'cairn serve'. A fenced document is stored as
{"cairn_fence": N, "value": …}; --set and --merge apply to the value.

Without --fence-token, update refuses (exit 3) a fenced document: writing
it without the token would erase its mark and let a stale holder in.
--unfenced applies the update to its value and keeps the mark, so holders
below it are still refused. The top-level field cairn_fence is reserved.`,
		Example: `  cairn doc update s3://lake/metastore/registry.json --set datasets.orders.version=7 --set owner=data-eng
  echo '{"paused": true}' | cairn doc update file:///srv/state/job.json --merge -
  cairn doc update s3://lake/state/compact.json --set done=true --create --fence-token "$CAIRN_FENCING_TOKEN"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := obj.args(args); err != nil {
				return err
			}
			if len(sets) == 0 && merge == "" {
				return usagef("give at least one --set PATH=VALUE or --merge FILE")
			}
			var patch any
			if merge != "" {
				data, err := readInput(e, merge)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(data, &patch); err != nil {
					return usagef("--merge %s: not JSON: %v", merge, err)
				}
			}
			type setOp struct {
				path []string
				val  any
			}
			var ops []setOp
			for _, s := range sets {
				p, v, ok := strings.Cut(s, "=")
				if !ok || p == "" {
					return usagef("--set %q: use PATH=VALUE", s)
				}
				var val any
				if json.Unmarshal([]byte(v), &val) != nil {
					val = v
				}
				ops = append(ops, setOp{strings.Split(p, "."), val})
			}
			fenced := cmd.Flags().Changed("fence-token")
			if fenced && unfenced {
				return usagef("--fence-token and --unfenced exclude each other: pass the token your lock handed out, or --unfenced to update without one")
			}
			var token int64
			if fenced {
				var err error
				if token, err = parseFenceToken(fenceToken); err != nil {
					return err
				}
			}
			d, key, err := openDoc(cmd, &obj, args)
			if err != nil {
				return err
			}
			defer d.Objects().Close()
			apply := func(v *any, m docstore.Meta) error {
				if !m.Exists && !create {
					return fmt.Errorf("%q does not exist (create it with 'cairn doc create', or pass --create): %w", key, objstore.ErrNotFound)
				}
				if patch != nil {
					*v = mergePatch(*v, patch)
				}
				for _, op := range ops {
					if err := setPath(v, op.path, op.val); err != nil {
						return usageError{err}
					}
				}
				return nil
			}
			var v any
			var m docstore.Meta
			if fenced {
				var fm fence.DocMeta
				v, fm, err = fence.Update(cmd.Context(), d, key, token, func(v *any, m fence.DocMeta) error { return apply(v, m.Meta) })
				m = fm.Meta
			} else {
				// Without a token: the value, never the wrapper, and the
				// mark kept (--unfenced) or the update refused.
				var fm fence.DocMeta
				v, fm, err = fence.UpdateKeepingMark(cmd.Context(), d, key, func(v *any, m fence.DocMeta) error {
					if m.Token >= 0 && !unfenced {
						return fencedRefusal(&fence.FencedError{Key: key, Highest: m.Token})
					}
					if err := apply(v, m.Meta); err != nil {
						return err
					}
					if m.Token < 0 {
						data, _ := json.Marshal(*v)
						return unfencedValue(data)
					}
					return nil
				})
				m = fm.Meta
			}
			if err != nil {
				return err
			}
			data, _ := json.Marshal(v)
			return e.printDoc(m, data, e.json)
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "PATH=VALUE to set (repeatable)")
	nonEmptyVar(cmd.Flags(), &merge, "merge", "", "JSON merge patch file (- for stdin)", "name a file, or - for stdin")
	cmd.Flags().BoolVar(&create, "create", false, "create the document if it does not exist")
	nonEmptyVar(cmd.Flags(), &fenceToken, "fence-token", "", "update only if this fencing token is at least the highest the document has recorded (e.g. \"$CAIRN_FENCING_TOKEN\")", fenceTokenEmpty)
	cmd.Flags().BoolVar(&unfenced, "unfenced", false, "update a fenced document without a token, keeping its mark")
	obj.register(cmd)
	return cmd
}

// unfencedValue refuses a value stored without a mark whose top level holds
// cairn_fence (fence.CheckValue), as a usage error.
func unfencedValue(data []byte) error {
	if fence.CheckValue("", data) != nil {
		return usagef("the top-level field %q is reserved for the fencing token (a value holding it would read as a fenced document); rename it, or write the document with --fence-token", fence.DocField)
	}
	return nil
}

// mergePatch applies an RFC 7386 JSON merge patch.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = mergePatch(t[k], v)
		}
	}
	return t
}

func setPath(v *any, path []string, val any) error {
	if *v == nil {
		*v = map[string]any{}
	}
	cur, ok := (*v).(map[string]any)
	if !ok {
		return fmt.Errorf("cannot set %s: the document is not a JSON object", strings.Join(path, "."))
	}
	for i, p := range path[:len(path)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			if cur[p] != nil {
				return fmt.Errorf("cannot set %s: %s is not an object", strings.Join(path, "."), strings.Join(path[:i+1], "."))
			}
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	cur[path[len(path)-1]] = val
	return nil
}

// forCLI rewords the errors whose library message names a remedy only a Go
// program has (an Options field) into what a user of the command can do.
func forCLI(err error) error {
	var unsafe *docstore.UnsafeUpdateError
	if errors.As(err, &unsafe) {
		return fmt.Errorf("%s does not enforce conditional writes (put-if-absent and put-if-match; `cairn probe` shows what it enforces), "+
			"so concurrent updates of %q could be lost, and cairn writes no document, lease or lock there; "+
			"point cairn at a store that enforces both (`cairn probe URL --require put-if-absent,put-if-match` checks one): %w",
			unsafe.Store, unsafe.Key, objstore.ErrNotSupported)
	}
	if errors.Is(err, docstore.ErrContention) {
		// Options.MaxAttempts is not the command's to raise.
		return reworded{strings.ReplaceAll(err.Error(), docstore.ErrContention.Error(),
			"gave up after repeated conflicting writes by other writers; run the command again later: "+objstore.ErrPreconditionFailed.Error()), err}
	}
	return err
}

// reworded is err with another message; errors.Is and As still see err.
type reworded struct {
	msg string
	err error
}

func (r reworded) Error() string { return r.msg }
func (r reworded) Unwrap() error { return r.err }
