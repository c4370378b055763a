package cli

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// envName is the environment variable for a flag: CAIRN_ and the flag's name
// in upper case with dashes as underscores (--webhook-token → CAIRN_WEBHOOK_TOKEN).
func envName(flag string) string {
	return "CAIRN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnvAndConfig fills the command's flags that were not given on the
// command line: first from CAIRN_* environment variables, then from the YAML
// config file (keys are flag names; lists for repeatable flags), named by
// --config or else CAIRN_CONFIG (a Lambda function's bootstrap gets no
// flags). Precedence: flag, environment, file, default. Unknown keys in the
// file are an error.
func applyEnvAndConfig(cmd *cobra.Command, configFile string) error {
	fs := cmd.Flags()
	if !fs.Changed("config") {
		if v, ok := os.LookupEnv(envName("config")); ok {
			if v == "" {
				return usagef("%s is set but empty: name the config file, or unset it", envName("config"))
			}
			configFile = v
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if set[f.Name] || f.Name == "config" || f.Name == "help" || firstErr != nil {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		vals := []string{v}
		if isList(f) {
			vals = strings.Fields(v)
		}
		for _, v := range vals {
			if err := f.Value.Set(v); err != nil {
				firstErr = usagef("%s=%q: %v", envName(f.Name), v, err)
				return
			}
		}
		f.Changed = true
		set[f.Name] = true
	})
	if firstErr != nil || configFile == "" {
		return firstErr
	}
	data, err := os.ReadFile(configFile)
	if err != nil {
		return usagef("--config: %v", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return usagef("--config %s: %v", configFile, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || k == "config" || k == "help" {
			return usagef("--config %s: unknown setting %q (settings are the flags of 'cairn %s', without dashes)", configFile, k, cmd.Name())
		}
		if set[k] {
			continue
		}
		var vals []string
		switch v := doc[k].(type) {
		case []any:
			if !isList(f) {
				return usagef("--config %s: %s takes one value, not a list", configFile, k)
			}
			for _, x := range v {
				vals = append(vals, fmt.Sprint(x))
			}
		case map[string]any:
			return usagef("--config %s: %s takes a value, not a mapping", configFile, k)
		case nil:
			continue
		default:
			vals = []string{fmt.Sprint(v)}
		}
		for _, v := range vals {
			if err := f.Value.Set(v); err != nil {
				return usagef("--config %s: %s: %q: %v", configFile, k, v, err)
			}
		}
		f.Changed = true
	}
	return nil
}

func isList(f *pflag.Flag) bool {
	return slices.Contains([]string{"stringArray", "stringSlice"}, f.Value.Type())
}
