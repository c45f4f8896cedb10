package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/preflight"
	"github.com/bloomgate/bloomgate/internal/proctest"
)

// helm renders the chart; .ci/deps.sh builds it for `make test`. The
// chart's objects are decoded strictly into the Kubernetes types by the
// release module (release/chart_test.go); here its worker settings go
// through bloomgate's own parser.
var helmTool = proctest.Tool{
	Env:   "BLOOMGATE_HELM",
	Names: []string{"helm"},
	Skip:  "helm not found (`make test` builds helm v4 with .ci/deps.sh, or set BLOOMGATE_HELM)",
	Fail:  "helm not found although BLOOMGATE_REQUIRE_TOOLS=1: run .ci/deps.sh or set BLOOMGATE_HELM",
}

const chartDir = "deployments/helm/bloomgate"

// chartCases are the chart's defaults and every values example.
func chartCases(t *testing.T) map[string]string {
	t.Helper()
	cases := map[string]string{"default": ""}
	files, err := filepath.Glob(filepath.Join(root, chartDir, "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values examples in %s/examples: %v", chartDir, err)
	}
	for _, f := range files {
		cases[strings.TrimSuffix(filepath.Base(f), ".yaml")] = f
	}
	return cases
}

// helmTemplate renders the chart with the values file (if any) and
// returns its objects by kind.
func helmTemplate(t *testing.T, helm, values string) (byKind map[string]map[string]any, vals map[string]any) {
	t.Helper()
	args := []string{"template", "bg", filepath.Join(root, chartDir)}
	if values != "" {
		args = append(args, "-f", values)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	byKind = map[string]map[string]any{}
	dec := yaml.NewDecoder(&stdout)
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if d == nil {
			continue
		}
		kind := str(d, "kind")
		if strings.HasSuffix(str(d, "metadata", "name"), "-dashboard") {
			kind += "/dashboard"
		}
		if byKind[kind] != nil {
			t.Fatalf("two %s", kind)
		}
		byKind[kind] = d
	}
	// The values in force: the defaults, overlaid by the file.
	vals = map[string]any{}
	for _, f := range []string{filepath.Join(root, chartDir, "values.yaml"), values} {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		mergeValues(vals, v)
	}
	return byKind, vals
}

// mergeValues overlays src on dst as helm does: maps merge, the rest is
// replaced.
func mergeValues(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// TestHelmChartSettings: for the defaults and every values example, the
// StatefulSet's arguments, its environment and the ConfigMap's file are
// accepted by `bloomgate run`'s parser and validation (config.Load, what
// run does before it starts anything), and the memory request covers the
// planned filters of the partitions a pod may hold.
func TestHelmChartSettings(t *testing.T) {
	helm := helmTool.Path(t)
	known := envNames()
	for name, values := range chartCases(t) {
		t.Run(name, func(t *testing.T) {
			k, vals := helmTemplate(t, helm, values)
			sts, cm := k["StatefulSet"], k["ConfigMap"]
			if sts == nil || cm == nil {
				t.Fatalf("rendered kinds %v: want a StatefulSet and a ConfigMap", keys(k))
			}
			c := dig(sts, "spec", "template", "spec", "containers", "0")
			args := list(c, "args")
			if len(args) < 3 || args[0] != "run" || args[1] != "--config" {
				t.Fatalf("args %v, want run --config FILE …", args)
			}
			// The file of the ConfigMap, where --config points (its
			// mount is checked in release/chart_test.go).
			file := filepath.Join(t.TempDir(), "bloomgate.yaml")
			if err := os.WriteFile(file, []byte(str(cm, "data", "bloomgate.yaml")), 0o600); err != nil {
				t.Fatal(err)
			}
			var cli []string
			for i, a := range args[1:] {
				s, _ := a.(string)
				if i == 1 {
					s = file
				}
				cli = append(cli, s)
			}
			env := map[string]string{}
			for _, e := range list(c, "env") {
				n := str(e, "name")
				switch {
				case strings.HasPrefix(n, config.EnvPrefix+"_"):
					if _, ok := known[n]; !ok {
						t.Errorf("env %s is not a setting", n)
					}
				case n == "POD_NAME" || n == "GOMEMLIMIT" || strings.HasPrefix(n, "AWS_"):
				default:
					t.Errorf("env %s: neither a setting nor one the worker reads", n)
				}
				switch {
				case str(e, "valueFrom", "secretKeyRef", "name") != "":
					env[n] = "from-secret"
				case str(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name":
					env[n] = str(sts, "metadata", "name") + "-0"
				case dig(e, "value") != nil:
					env[n] = str(e, "value")
				}
			}
			cfg := loadArgs(t, cli, env)
			if got, want := cfg.InstanceID(), str(sts, "metadata", "name")+"-0"; got != want {
				t.Errorf("static member id %q, want the pod name %s", got, want)
			}
			if cfg.MetricsAddr != fmt.Sprint(":", dig(c, "ports", "0", "containerPort")) {
				t.Errorf("metrics-addr %q is not the container port %v", cfg.MetricsAddr, dig(c, "ports", "0", "containerPort"))
			}
			if strings.HasPrefix(cfg.CheckpointURL, "file://") || strings.HasPrefix(cfg.CheckpointURL, "mem://") {
				t.Errorf("checkpoint-url %s: pods are replaced; use s3://", cfg.CheckpointURL)
			}

			// Memory: as in TestKubernetes, for the fewest pods the chart
			// runs (KEDA's minimum when it scales) less one disrupted.
			partitions, _ := dig(vals, "inputPartitions").(int)
			replicas, _ := dig(vals, "replicas").(int)
			if dig(vals, "autoscaling", "keda", "enabled") == true {
				replicas, _ = dig(vals, "autoscaling", "keda", "minReplicas").(int)
			}
			perPod := partitions
			if replicas > 1 {
				perPod = (partitions + replicas - 2) / (replicas - 1)
			}
			plan := bloom.Config(cfg.Params)
			plan.Capacity = (cfg.Capacity + uint64(partitions) - 1) / uint64(partitions)
			sz, err := PartitionSizing(plan)
			if err != nil {
				t.Fatal(err)
			}
			need := uint64(perPod)*(sz.Bytes+sz.GenerationBytes) + BaselineBytes
			if cfg.Exact {
				// Exact mode: ~1.2× the filters' memory (as for the
				// kustomize overlay), and its volume holds the stores.
				need = uint64(1.2*float64(uint64(perPod)*(sz.Bytes+sz.GenerationBytes))) + BaselineBytes
				checkExactVolume(t, sts, c, cfg, perPod, plan.Capacity)
			}
			req, err := quantity(str(c, "resources", "requests", "memory"))
			if err != nil {
				t.Fatal(err)
			}
			limit, err := quantity(str(c, "resources", "limits", "memory"))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d partitions, %d per pod: %.1f MiB each, %.0f MiB needed; request %d MiB, limit %d MiB",
				partitions, perPod, float64(sz.Bytes+sz.GenerationBytes)/(1<<20), float64(need)/(1<<20), req>>20, limit>>20)
			if req < need {
				t.Errorf("memory request %d MiB < %.0f MiB needed", req>>20, float64(need)/(1<<20))
			}
			if limit < req || limit > 4*req {
				t.Errorf("memory limit %d MiB: want between the request and 4× it", limit>>20)
			}
		})
	}
}

// checkExactVolume: --exact-dir is on a volume of its own (an emptyDir
// with a sizeLimit, within the pod's ephemeral-storage request, or a
// claim per pod) that holds the stores of the partitions a pod may hold.
func checkExactVolume(t *testing.T, sts map[string]any, c any, cfg *config.Run, perPod int, capacity uint64) {
	t.Helper()
	var volume string
	for _, m := range list(c, "volumeMounts") {
		if mp := str(m, "mountPath"); cfg.ExactDir == mp || strings.HasPrefix(cfg.ExactDir, mp+"/") {
			volume = str(m, "name")
		}
	}
	var size uint64
	var err error
	for _, v := range list(sts, "spec", "template", "spec", "volumes") {
		if str(v, "name") == volume {
			if size, err = quantity(str(v, "emptyDir", "sizeLimit")); err != nil {
				t.Fatalf("--exact-dir's volume %s: want an emptyDir with a sizeLimit: %v", volume, err)
			}
			eph, err := quantity(str(c, "resources", "requests", "ephemeral-storage"))
			if err != nil || eph < size {
				t.Errorf("ephemeral-storage request %q: want at least the exact volume's %d MiB", str(c, "resources", "requests", "ephemeral-storage"), size>>20)
			}
		}
	}
	for _, pvc := range list(sts, "spec", "volumeClaimTemplates") {
		if str(pvc, "metadata", "name") == volume {
			if size, err = quantity(str(pvc, "spec", "resources", "requests", "storage")); err != nil {
				t.Fatalf("claim %s: %v", volume, err)
			}
		}
	}
	need := uint64(perPod) * preflight.ExactStoreBytes(capacity, cfg.Generations)
	t.Logf("exact stores: %d partitions per pod need %d MiB; volume %q holds %d MiB", perPod, need>>20, volume, size>>20)
	if volume == "" || size < need {
		t.Errorf("--exact-dir %s: volume %q of %d MiB < %d MiB needed", cfg.ExactDir, volume, size>>20, need>>20)
	}
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// loadArgs is loadConfig for a whole command line.
func loadArgs(t *testing.T, args []string, env map[string]string) *config.Run {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.EnvPrefix+"_") || k == "POD_NAME" || k == "HOSTNAME" || k == "KUBERNETES_SERVICE_HOST" {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out bytes.Buffer
	cfg, err := config.Load(args, &out)
	if err != nil {
		t.Fatalf("bloomgate run %s with %v: %v", strings.Join(args, " "), env, err)
	}
	return cfg
}
