package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairn-s3/cairn/internal/safetext"
	"github.com/cairn-s3/cairn/objstore"
)

// nonEmpty is a string flag whose value, once given, may not be empty: a
// condition, token, key, name or filter that an unset variable emptied
// ("--if-match $ETAG" after a lookup that failed) must not quietly mean "no
// condition", "no token" or "everything". Set refuses it, so the flag's name
// is in the error (pflag's "invalid argument "" for "--if-match" flag"), which
// exits 2 like every flag error, and a CAIRN_* variable or a config file is
// refused the same way.
type nonEmpty struct {
	p     *string
	why   string             // what an empty value would have done
	check func(string) error // further checks of a value (optional)
}

func (v *nonEmpty) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v *nonEmpty) Type() string { return "string" }

func (v *nonEmpty) Set(s string) error {
	if s == "" {
		return emptyValueError(v.why)
	}
	if v.check != nil {
		if err := v.check(s); err != nil {
			return err
		}
	}
	*v.p = s
	return nil
}

func emptyValueError(why string) error {
	msg := "the value is empty (is the variable that should hold it unset?)"
	if why != "" {
		msg += "; " + why
	}
	return errors.New(msg)
}

// nonEmptyVar defines a string flag that refuses an empty value; why says
// what an empty value would have done.
func nonEmptyVar(fs *pflag.FlagSet, p *string, name, value, usage, why string) *nonEmpty {
	*p = value
	v := &nonEmpty{p: p, why: why}
	fs.Var(v, name, usage)
	return v
}

// nonEmptyArray is a repeatable string flag (Type stringArray, so CAIRN_*
// variables and config lists fill it as they do StringArrayVar) whose every
// value must be non-empty.
type nonEmptyArray struct {
	p   *[]string
	why string
}

func (v *nonEmptyArray) String() string { return fmt.Sprint(*v.p) }
func (v *nonEmptyArray) Type() string   { return "stringArray" }

func (v *nonEmptyArray) Set(s string) error {
	if s == "" {
		return emptyValueError(v.why)
	}
	*v.p = append(*v.p, s)
	return nil
}

func nonEmptyArrayVar(fs *pflag.FlagSet, p *[]string, name, usage, why string) {
	fs.Var(&nonEmptyArray{p: p, why: why}, name, usage)
}

// nonEmptyList is a comma-separated list flag (Type stringSlice) that refuses
// an empty value and empty items ("a,,b").
type nonEmptyList struct {
	p   *[]string
	why string
}

func (v *nonEmptyList) String() string { return strings.Join(*v.p, ",") }
func (v *nonEmptyList) Type() string   { return "stringSlice" }

func (v *nonEmptyList) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return emptyValueError(v.why)
	}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			return fmt.Errorf("%q has an empty item", s)
		}
		*v.p = append(*v.p, item)
	}
	return nil
}

func nonEmptyListVar(fs *pflag.FlagSet, p *[]string, name, usage, why string) {
	fs.Var(&nonEmptyList{p: p, why: why}, name, usage)
}

// objectFlags name one object either as a URL (a positional argument) or as
// --store URL --key KEY, where the key is taken byte for byte and never
// parsed as part of a URL: a key from an event ($CAIRN_KEY) may hold '#',
// '?', '%', spaces or "..", which a URL would mangle or refuse.
type objectFlags struct {
	store, key string
}

const keyUsage = "the object's key, taken byte for byte (never parsed as a URL); with --store, instead of the URL argument"

func (o *objectFlags) register(cmd *cobra.Command) {
	nonEmptyVar(cmd.Flags(), &o.store, "store", "", "the store's URL (s3://bucket/prefix?…, file:///dir, a directory, mem://name); with --key, instead of the URL argument",
		"name the store (s3://bucket, file:///dir, …)")
	nonEmptyVar(cmd.Flags(), &o.key, "key", "", keyUsage, "an object's key is never empty")
}

// given reports whether the object is named by --store and --key.
func (o *objectFlags) given() bool { return o.store != "" || o.key != "" }

// args checks the URL arguments against the flags: one URL, or --store and
// --key and no URL.
func (o *objectFlags) args(urls []string) error {
	switch {
	case o.given() && len(urls) > 0:
		return usagef("give the object either as a URL argument or as --store URL --key KEY, not both (got %q too)", urls[0])
	case o.store != "" && o.key == "":
		return usagef("--store needs --key KEY: the object's key inside the store")
	case o.key != "" && o.store == "":
		return usagef("--key needs --store URL: the store the key is in")
	case !o.given() && len(urls) == 0:
		return usagef("name the object: a URL argument, or --store URL --key KEY")
	}
	return nil
}

// open opens the object's store and returns it with the object's key. A bad
// URL or key exits 2.
func (o *objectFlags) open(ctx context.Context, urls []string) (*objstore.Store, string, error) {
	if err := o.args(urls); err != nil {
		return nil, "", err
	}
	if !o.given() {
		return objstore.OpenObject(ctx, urls[0], nil)
	}
	if err := objstore.ValidateKey(o.key); err != nil {
		return nil, "", usageError{fmt.Errorf("--key: %w", err)}
	}
	s, err := openStore(ctx, o.store)
	if err != nil {
		return nil, "", err
	}
	return s, o.key, nil
}

// name is how messages and environment variables name the object: its URL,
// or the store's URL and the key.
func (o *objectFlags) name(urls []string) string {
	if !o.given() && len(urls) > 0 {
		return urls[0]
	}
	return o.store + " key " + o.key
}

// display is name for a terminal: passwords hidden, controls escaped.
func (o *objectFlags) display(urls []string) string {
	if !o.given() && len(urls) > 0 {
		return safetext.URL(urls[0])
	}
	return safetext.URL(o.store) + " key " + safetext.Escape(o.key)
}
