package deploy

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bloomgate/bloomgate/internal/bloom"
	"github.com/bloomgate/bloomgate/internal/preflight"
)

// applyJSONPatch applies the "add" operations of an RFC 6902 patch to doc
// (the only operation the overlays use); "-" appends to a list.
func applyJSONPatch(t *testing.T, doc map[string]any, ops []any) {
	t.Helper()
	for _, op := range ops {
		if str(op, "op") != "add" {
			t.Fatalf("patch op %v: only add is applied here", op)
		}
		parts := strings.Split(strings.TrimPrefix(str(op, "path"), "/"), "/")
		parent := dig(doc, parts[:len(parts)-1]...)
		last := parts[len(parts)-1]
		value := dig(op, "value")
		switch p := parent.(type) {
		case map[string]any:
			p[last] = value
		case []any:
			if last != "-" {
				t.Fatalf("patch path %s: only - is applied to lists here", str(op, "path"))
			}
			grand := dig(doc, parts[:len(parts)-2]...).(map[string]any)
			grand[parts[len(parts)-2]] = append(p, value)
		default:
			t.Fatalf("patch path %s: no such parent in the base", str(op, "path"))
		}
	}
}

// TestKubernetesExactOverlay: overlays/exact patches the base for exact
// mode: BLOOMGATE_EXACT and BLOOMGATE_EXACT_DIR load as a valid
// configuration with the base's ConfigMap; --exact-dir is a writable
// emptyDir mount (the root filesystem stays read-only) whose size limit
// holds the stores of the most partitions a pod holds at the ConfigMap's
// plan (preflight.ExactStoreBytes, as bloomgate check computes it); the
// pod requests that ephemeral storage (the base's /tmp included); and the
// memory request still covers the filters with exact mode's measured 1.2×
// of anonymous memory (docs/exact.md).
func TestKubernetesExactOverlay(t *testing.T) {
	const dir = "deployments/kubernetes/overlays/exact"
	kust := yamlDocs(t, dir+"/kustomization.yaml")[0]
	if r := list(kust, "resources"); len(r) != 1 || r[0] != "../.." {
		t.Fatalf("resources %v, want the base (../..)", r)
	}
	if str(kust, "patches", "0", "target", "kind") != "Deployment" || str(kust, "patches", "0", "target", "name") != "bloomgate" {
		t.Fatalf("patch target %v, want the bloomgate Deployment", dig(kust, "patches", "0", "target"))
	}
	var ops []any
	if err := yaml.Unmarshal(repoFile(t, dir+"/"+str(kust, "patches", "0", "path")), &ops); err != nil {
		t.Fatal(err)
	}
	baseKust, k := k8sDocs(t)
	dep := k["Deployment"]
	applyJSONPatch(t, dep, ops)
	pod := dig(dep, "spec", "template", "spec")
	c := dig(pod, "containers", "0")

	env := map[string]string{"BLOOMGATE_SASL_PASSWORD": "from-secret"}
	for _, e := range list(c, "env") {
		if name := str(e, "name"); strings.HasPrefix(name, "BLOOMGATE_") && str(e, "value") != "" {
			env[name] = str(e, "value")
		}
	}
	_, src, _ := strings.Cut(str(baseKust, "configMapGenerator", "0", "files", "0"), "=")
	cfg := loadConfig(t, filepath.Join(root, "deployments/kubernetes", src), env)
	if !cfg.Exact {
		t.Fatal("the overlay does not turn exact mode on")
	}

	var volume string
	for _, m := range list(c, "volumeMounts") {
		if mp := str(m, "mountPath"); cfg.ExactDir == mp || strings.HasPrefix(cfg.ExactDir, mp+"/") {
			volume = str(m, "name")
			if dig(m, "readOnly") == true {
				t.Errorf("--exact-dir %s is mounted read-only", cfg.ExactDir)
			}
		}
	}
	var sizeLimit, tmpLimit uint64
	for _, v := range list(pod, "volumes") {
		switch str(v, "name") {
		case volume:
			var err error
			if sizeLimit, err = quantity(str(v, "emptyDir", "sizeLimit")); err != nil {
				t.Fatalf("--exact-dir's volume %s: want an emptyDir with a sizeLimit: %v", volume, err)
			}
		case "tmp":
			tmpLimit, _ = quantity(str(v, "emptyDir", "sizeLimit"))
		}
	}
	if volume == "" || sizeLimit == 0 {
		t.Fatalf("--exact-dir %s is not on a volume of its own", cfg.ExactDir)
	}
	if dig(c, "securityContext", "readOnlyRootFilesystem") != true {
		t.Error("the overlay turned the read-only root filesystem off")
	}

	partitions, _ := strconv.Atoi(str(dep, "metadata", "annotations", "bloomgate.dev/sizing-input-partitions"))
	perPod, _ := strconv.Atoi(str(dep, "metadata", "annotations", "bloomgate.dev/sizing-max-partitions-per-pod"))
	capacity := (cfg.Capacity + uint64(partitions) - 1) / uint64(partitions)
	need := uint64(perPod) * preflight.ExactStoreBytes(capacity, cfg.Generations)
	t.Logf("exact stores: %d partitions per pod need %d MiB; sizeLimit %d MiB", perPod, need>>20, sizeLimit>>20)
	if sizeLimit < need {
		t.Errorf("--exact-dir's sizeLimit %d MiB < %d MiB needed", sizeLimit>>20, need>>20)
	}
	req, err := quantity(str(c, "resources", "requests", "ephemeral-storage"))
	if err != nil || req < sizeLimit+tmpLimit {
		t.Errorf("ephemeral-storage request %q (%v): want at least the exact volume and /tmp, %d MiB", str(c, "resources", "requests", "ephemeral-storage"), err, (sizeLimit+tmpLimit)>>20)
	}
	if lim, err := quantity(str(c, "resources", "limits", "ephemeral-storage")); err != nil || lim < req {
		t.Errorf("ephemeral-storage limit %q: want at least the request", str(c, "resources", "limits", "ephemeral-storage"))
	}

	plan := bloom.Config(cfg.Params)
	plan.Capacity = capacity
	sz, err := PartitionSizing(plan)
	if err != nil {
		t.Fatal(err)
	}
	mem := uint64(1.2*float64(uint64(perPod)*(sz.Bytes+sz.GenerationBytes))) + BaselineBytes
	if r, err := quantity(str(c, "resources", "requests", "memory")); err != nil || r < mem {
		t.Errorf("memory request %d MiB < %d MiB for exact mode", r>>20, mem>>20)
	}
}
