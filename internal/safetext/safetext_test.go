package safetext_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cairn-s3/cairn/internal/safetext"
)

var redactCases = []struct{ in, want string }{
	// Nothing to hide.
	{"cairn-data/ledger.db", "cairn-data/ledger.db"},
	{"sqlite:///var/lib/cairn/ledger.db", "sqlite:///var/lib/cairn/ledger.db"},
	{"s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1", "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1"},
	{"postgres://u@h:5432/db?sslmode=disable", "postgres://u@h:5432/db?sslmode=disable"},
	{"postgres://[::1]:5432/db?application_name=a@b", "postgres://[::1]:5432/db?application_name=a@b"},
	{"host=h user=u dbname=d", "host=h user=u dbname=d"},
	{"", ""},
	// URL userinfo.
	{"postgres://u:secret@h/db", "postgres://u:xxxxx@h/db"},
	{"postgresql://u:secret@h1:5432,h2:5433/db?sslmode=require", "postgresql://u:xxxxx@h1:5432,h2:5433/db?sslmode=require"},
	{"postgres://u:se%40cret@h/db", "postgres://u:xxxxx@h/db"},
	{"postgres://u:pa?ss@h/db", "postgres://u:xxxxx@h/db"},
	{"postgres://u:p@ss@h/db", "postgres://u:xxxxx@h/db"},
	{"postgres://u:pa/ss@h/db", "postgres://u:xxxxx@h/db"},
	{"postgres://u:pa#ss@h/db", "postgres://u:xxxxx@h/db"},
	{"postgres://:secret@h/db", "postgres://:xxxxx@h/db"},
	{"s3://key:secret@bucket/p", "s3://key:xxxxx@bucket/p"},
	{"s3://bucket/p?endpoint=http://k:secret@minio:9000", "s3://bucket/p?endpoint=http://k:xxxxx@minio:9000"},
	// Query parameters.
	{"postgres://u@h/db?password=secret", "postgres://u@h/db?password=xxxxx"},
	{"postgres://u@h/db?sslmode=disable&password=secret&connect_timeout=2", "postgres://u@h/db?sslmode=disable&password=xxxxx&connect_timeout=2"},
	{"postgres://u@h/db?sslpassword=secret&sslkey=/k", "postgres://u@h/db?sslpassword=xxxxx&sslkey=/k"},
	{"postgres://u@h/db?pass%77ord=secret", "postgres://u@h/db?pass%77ord=xxxxx"},
	{"postgres://u:a@h/db?password=b", "postgres://u:xxxxx@h/db?password=xxxxx"},
	{"postgres://u@[::1?]/db?password=secret", "postgres://u@[::1?]/db?password=xxxxx"},
	// pgx reads "?=" as the bracketed host, then password=0 (Go's net/url
	// would start the query inside the brackets).
	{"postgres://[?=],?password=0", "postgres://[?=],?password=xxxxx"},
	{"postgres://h/db?next=/a?password=b&x=1", "postgres://h/db?next=/a?password=xxxxx&x=1"},
	{"postgres://h?password=?pw?&x=1", "postgres://h?password=xxxxx&x=1"},
	{"nats://h:4222?stream=s&token=secret", "nats://h:4222?stream=s&token=xxxxx"},
	// Keyword/value strings.
	{"host=h user=u password=secret", "host=h user=u password=xxxxx"},
	{"host=h password=secret user=u", "host=h password=xxxxx user=u"},
	{"password='with spaces' host=h", "password=xxxxx host=h"},
	{"password = 'it\\'s' host=h", "password = xxxxx host=h"},
	{"password=a\\ b host=h", "password=xxxxx host=h"},
	{"host=h sslpassword=secret", "host=h sslpassword=xxxxx"},
	{"host=h password='unterminated", "host=h password=xxxxx"},
	{"application_name='x password=secret", "application_name='x password=xxxxx"},
	{"host=h  user u password=secret", "host=h  user u password=xxxxx"},
	{"application_name='a password=b' password=secret", "application_name='a password=b' password=xxxxx"},
	{"host=h sslrootcert=file://x password=secret", "host=h sslrootcert=file://x password=xxxxx"},
	{" postgres://u:secret@h/db", " postgres://u:xxxxx@h/db"},
	{"postgresql:h/db?sslmode=disable&password=secret&x=y", "postgresql:h/db?sslmode=disable&password=xxxxx&x=y"},
	{"&=''password=secret", "&=''password=xxxxx"},
}

func TestRedact(t *testing.T) {
	for _, tc := range redactCases {
		if got := safetext.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// kwQuote quotes a libpq keyword value.
func kwQuote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// kwBare escapes a libpq keyword value without quotes.
func kwBare(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if strings.IndexByte(" \t\n\r\v\f\\'", v[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// connString writes secret into a connection string of one of the forms pgx
// accepts, with user and db around it.
func connString(form uint8, user, secret, db string) string {
	switch form % 8 {
	case 0:
		return (&url.URL{Scheme: "postgres", User: url.UserPassword(user, secret), Host: "h:5432", Path: "/" + db, RawQuery: "sslmode=disable"}).String()
	case 1:
		return (&url.URL{Scheme: "postgresql", User: url.User(user), Host: "h", Path: "/" + db}).String() + "?password=" + url.QueryEscape(secret) + "&sslmode=disable"
	case 2:
		return "postgres://h/" + url.PathEscape(db) + "?sslpassword=" + url.QueryEscape(secret)
	case 3:
		return "host=h user=" + kwQuote(user) + " password=" + kwQuote(secret) + " dbname=" + kwQuote(db)
	case 4:
		return "password=" + kwBare(secret) + " user=" + kwBare(user) + " dbname=" + kwBare(db)
	case 5:
		return "dbname=" + kwQuote(db) + "  password = " + kwQuote(secret)
	case 6:
		return "s3://" + url.UserPassword(user, secret).String() + "@bucket/" + url.PathEscape(db)
	default:
		return "host=h sslpassword=" + kwQuote(secret) + " user=" + kwBare(user)
	}
}

// FuzzRedact: whatever the secret, the user and the database name, the
// redacted string never contains the secret (in any of its encodings) and
// does not depend on it at all.
func FuzzRedact(f *testing.F) {
	for form := range uint8(8) {
		f.Add(form, "u", "secret", "db")
		f.Add(form, "a b", "with spaces", "x'y")
		f.Add(form, "u:v@w", "p@ss:/w?rd#&=", "d/b?c")
		f.Add(form, "", `a\'b'\`, "")
	}
	f.Fuzz(func(t *testing.T, form uint8, user, secret, db string) {
		if secret == "" || strings.Contains(secret, safetext.Mask) || strings.Contains(safetext.Mask, secret) {
			return
		}
		s := connString(form, user, secret, db)
		got := safetext.Redact(s)
		ref := safetext.Redact(connString(form, user, "R", db))
		if got != ref {
			t.Fatalf("Redact(%q) = %q depends on the secret (with secret R: %q)", s, got, ref)
		}
		for _, enc := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret), kwBare(secret)} {
			if strings.Contains(got, enc) && !strings.Contains(ref, enc) {
				t.Fatalf("Redact(%q) = %q shows the secret %q", s, got, enc)
			}
		}
	})
}

// FuzzRedactPGX: for any string pgx parses to a config with a password, the
// redacted string does not parse to that password, nor contain it where the
// original held it exactly once.
func FuzzRedactPGX(f *testing.F) {
	f.Setenv("PGPASSWORD", "")
	f.Setenv("PGPASSFILE", "/nonexistent/pgpass")
	f.Setenv("PGSERVICEFILE", "/nonexistent/pgservice")
	f.Setenv("PGSSLPASSWORD", "")
	for _, tc := range redactCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := pgconn.ParseConfig(s)
		if err != nil || cfg.Password == "" || cfg.Password == safetext.Mask {
			return
		}
		got := safetext.Redact(s)
		if c2, err := pgconn.ParseConfig(got); err == nil && c2.Password == cfg.Password {
			t.Fatalf("Redact(%q) = %q still carries password %q", s, got, cfg.Password)
		}
		p := cfg.Password
		if len(p) >= 3 && strings.Count(s, p) == 1 && strings.Contains(got, p) && !strings.Contains(safetext.Mask, p) {
			t.Fatalf("Redact(%q) = %q shows password %q", s, got, p)
		}
	})
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain/key.txt", "plain/key.txt"},
		{"dir/with space/ünï cødé 日本 ✓.txt", "dir/with space/ünï cødé 日本 ✓.txt"},
		{"émoji 🎉/file", "émoji 🎉/file"},
		{`back\slash`, `back\slash`},
		{"", ""},
		{"\x1b]0;pwned\a\x1b[2J", `"\x1b]0;pwned\a\x1b[2J"`},
		{"tab\there", `"tab\there"`},
		{"line\nbreak", `"line\nbreak"`},
		{"del\x7f", `"del\x7f"`},
		{"csi\u009b2J", `"csi\u009b2J"`},
		{"bad\xffutf8", `"bad\xffutf8"`},
		{"bidi\u202eevil", `"bidi\u202eevil"`},
		{`"quoted"`, `"\"quoted\""`},
		{`a\x1b` + "\x1b", `"a\\x1b\x1b"`},
	} {
		if got := safetext.Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := safetext.URL("postgres://u:secret@h/\x1b[2J"); got != `"postgres://u:xxxxx@h/\x1b[2J"` {
		t.Errorf("URL: %s", got)
	}
}

// FuzzEscape: the escaped string holds no control character, no C1 and no
// invalid UTF-8, and reads back exactly.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"a", "\x1b]0;t\a", "\xc2\x9b", "\xff", `"`, "ok ✓"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := safetext.Escape(s)
		if !utf8.ValidString(got) {
			t.Fatalf("Escape(%q) = %q: invalid UTF-8", s, got)
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
				t.Fatalf("Escape(%q) = %q holds control character %U", s, got, r)
			}
		}
		if got == s {
			return
		}
		if back, err := strconv.Unquote(got); err != nil || back != s {
			t.Fatalf("Escape(%q) = %q does not read back (%q, %v)", s, got, back, err)
		}
	})
}
