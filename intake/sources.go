package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cairn-s3/cairn/internal/registry"
)

// A SourceOpener opens a pull source from its URL (e.g.
// nats://host:4222?stream=S); log may be nil. Source packages register one per
// scheme with RegisterSource.
type SourceOpener func(ctx context.Context, url string, log *slog.Logger) (Source, error)

var sourceOpeners registry.Registry[SourceOpener]

// RegisterSource makes a source available to OpenSource under scheme; the
// packages intake/natssrc (nats), intake/kafkasrc (kafka) and intake/sqssrc
// (sqs) register themselves when linked in. Registering a scheme twice panics.
func RegisterSource(scheme string, o SourceOpener) { sourceOpeners.Register("intake", scheme, o) }

// SourceSchemes lists the registered source schemes, sorted.
func SourceSchemes() []string { return sourceOpeners.Schemes() }

// ErrUnknownSource: OpenSource was given a URL whose scheme no linked source
// package registered.
var ErrUnknownSource = errors.New("intake: unknown source scheme")

// OpenSourceOptions configure OpenSource; nil means the defaults.
type OpenSourceOptions struct {
	// Logger is handed to the source. Default: discarded.
	Logger *slog.Logger
}

// OpenSource opens a pull source by its URL's scheme, as `cairn serve --source`
// does. The source's package must be linked in (import _
// "github.com/cairn-s3/cairn/intake/natssrc"); an unknown scheme is
// ErrUnknownSource, naming the registered ones. Nothing connects until the
// source runs. opts may be nil (the defaults).
func OpenSource(ctx context.Context, url string, opts *OpenSourceOptions) (Source, error) {
	scheme, _, ok := strings.Cut(url, "://")
	o, found := sourceOpeners.Get(scheme)
	if !ok || !found {
		known := strings.Join(SourceSchemes(), "://, ")
		if known == "" {
			return nil, fmt.Errorf("%w in %q: no source package is linked in; import intake/natssrc, intake/kafkasrc or intake/sqssrc", ErrUnknownSource, scheme)
		}
		return nil, fmt.Errorf("%w %q: want one of %s://", ErrUnknownSource, scheme, known)
	}
	log := slog.New(slog.DiscardHandler)
	if opts != nil && opts.Logger != nil {
		log = opts.Logger
	}
	return o(ctx, url, log)
}
