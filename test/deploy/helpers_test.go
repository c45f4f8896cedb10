package deploy

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bloomgate/bloomgate/internal/config"
)

// root is the repository root, seen from this package's directory.
const root = "../.."

func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	return b
}

func exists(rel string) bool {
	_, err := os.Stat(filepath.Join(root, rel))
	return err == nil
}

// yamlDocs decodes every document of a YAML stream into generic maps.
func yamlDocs(t *testing.T, rel string) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(repoFile(t, rel)))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("parsing %s: %v", rel, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// dig walks maps and lists: keys are map keys, or list indexes as numbers.
func dig(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func str(v any, path ...string) string {
	s, _ := dig(v, path...).(string)
	return s
}

func list(v any, path ...string) []any {
	l, _ := dig(v, path...).([]any)
	return l
}

// envNames is every BLOOMGATE_* variable the binary reads.
func envNames() map[string]string {
	names := map[string]string{}
	cfg := config.Default()
	cfg.FlagSet("run").VisitAll(func(f *flag.Flag) { names[config.LookupEnvName(f.Name)] = f.Name })
	return names
}

// loadConfig validates settings as `bloomgate run` would: the YAML file (if
// any) plus env, with every other BLOOMGATE_* variable of the test process
// unset.
func loadConfig(t *testing.T, file string, env map[string]string) *config.Run {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.EnvPrefix+"_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var args []string
	if file != "" {
		args = []string{"--config", file}
	}
	var out bytes.Buffer
	cfg, err := config.Load(args, &out)
	if err != nil {
		t.Fatalf("configuration %s %v does not load: %v", file, env, err)
	}
	return cfg
}

// quantity parses the Kubernetes quantities used here (Ki, Mi, Gi, or plain).
func quantity(s string) (uint64, error) {
	for suffix, mult := range map[string]uint64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseUint(n, 10, 64)
			return v * mult, err
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: use a whole number with Ki, Mi or Gi", s)
	}
	return v, nil
}
