package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const chart = root + "/deployments/helm/bloomgate"

// helmPath finds helm (.ci/deps.sh builds it for make test); without it
// the chart tests skip, or fail under BLOOMGATE_REQUIRE_TOOLS=1.
func helmPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BLOOMGATE_HELM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if os.Getenv("BLOOMGATE_REQUIRE_TOOLS") == "1" {
		t.Fatal("helm not found although BLOOMGATE_REQUIRE_TOOLS=1: run .ci/deps.sh or set BLOOMGATE_HELM")
	}
	t.Skip("helm not found (`make test` builds helm v4 with .ci/deps.sh, or set BLOOMGATE_HELM)")
	return ""
}

func helm(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// valuesCases: the defaults and every values example.
func valuesCases(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(chart + "/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no values examples: %v", err)
	}
	cases := map[string]string{"default": ""}
	for _, f := range files {
		cases[strings.TrimSuffix(filepath.Base(f), ".yaml")] = f
	}
	return cases
}

// ScaledObject is KEDA's keda.sh/v1alpha1 ScaledObject (KEDA v2), the
// fields of its spec as KEDA's API declares them. KEDA's Go module brings
// a controller's dependencies; this copy is what the chart is decoded
// against, so that a misspelled or mistyped field (trigger metadata must
// be strings) fails here as the API server would refuse it.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			Name                   string `json:"name"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Triggers              []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
			MetricType string `json:"metricType,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// kinds maps apiVersion/kind to the type a rendered object decodes into.
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return &ScaledObject{} },
}

// rendered is one `helm template`: its objects decoded, and each one's
// YAML text.
type rendered struct {
	objs []any
	text map[any]string
}

func (r rendered) all(t *testing.T, ptr any) []any {
	var out []any
	for _, o := range r.objs {
		if reflect.TypeOf(o) == reflect.TypeOf(ptr) {
			out = append(out, o)
		}
	}
	return out
}

func one[T any](t *testing.T, r rendered) T {
	t.Helper()
	var zero T
	got := r.all(t, zero)
	if len(got) != 1 {
		t.Fatalf("%d objects of type %T, want 1", len(got), zero)
	}
	return got[0].(T)
}

// decodeStrict decodes a rendered stream, each object into its API type,
// refusing unknown and duplicate fields (case-sensitively, as the API
// server's strict field validation does).
func decodeStrict(t *testing.T, stream []byte) rendered {
	t.Helper()
	r := rendered{text: map[any]string{}}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(stream), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		var tm metav1.TypeMeta
		if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
			t.Fatal(err)
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			t.Fatalf("rendered %s %s: not a kind the chart should make", tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		strict, err := kjson.UnmarshalStrict(js, obj)
		if err != nil {
			t.Fatalf("%s: %v", tm.Kind, err)
		}
		for _, e := range strict {
			t.Errorf("%s: %v", tm.Kind, e)
		}
		r.objs = append(r.objs, obj)
		r.text[obj] = doc
	}
	return r
}

func TestChartLint(t *testing.T) {
	bin := helmPath(t)
	for name, values := range valuesCases(t) {
		args := []string{"lint", "--strict", chart}
		if values != "" {
			args = append(args, "-f", values)
		}
		t.Run(name, func(t *testing.T) { helm(t, bin, args...) })
	}
}

// TestChartRender renders the defaults and every values example and
// decodes each object strictly into its Kubernetes type, then checks that
// the objects fit together: the StatefulSet, its Service and PDB, the
// ConfigMap mounted where --config points, Secrets, the Prometheus
// Operator objects, KEDA's ScaledObject. The worker's settings themselves
// go through bloomgate's parser in test/deploy (TestHelmChartSettings).
func TestChartRender(t *testing.T) {
	bin := helmPath(t)
	tag := releaseTag(t)
	alerts, err := os.ReadFile(filepath.Join(root, "deployments/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dashboard, err := os.ReadFile(filepath.Join(root, "deployments/grafana/dashboards/bloomgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for name, values := range valuesCases(t) {
		t.Run(name, func(t *testing.T) {
			args := []string{"template", "bg", chart, "--namespace", "dedup"}
			if values != "" {
				args = append(args, "-f", values)
			}
			r := decodeStrict(t, helm(t, bin, args...))
			for _, o := range r.objs {
				seen[fmt.Sprintf("%T", o)] = true
			}
			sts := one[*appsv1.StatefulSet](t, r)
			svc := one[*corev1.Service](t, r)
			pod := sts.Spec.Template
			sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
				t.Errorf("StatefulSet selector %v does not match its pods %v", sts.Spec.Selector, pod.Labels)
			}
			if sts.Spec.ServiceName != svc.Name || svc.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("serviceName %q: want the headless Service %s", sts.Spec.ServiceName, svc.Name)
			}
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				t.Error("Service selector does not match the pods")
			}
			for _, o := range r.all(t, &policyv1.PodDisruptionBudget{}) {
				pdb := o.(*policyv1.PodDisruptionBudget)
				s, _ := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				if !s.Matches(labels.Set(pod.Labels)) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("PDB %v", pdb.Spec)
				}
			}
			if len(pod.Spec.Containers) != 1 {
				t.Fatalf("%d containers", len(pod.Spec.Containers))
			}
			c := pod.Spec.Containers[0]
			if want := "ghcr.io/bloomgate/bloomgate:" + tag; c.Image != want {
				t.Errorf("image %s, want %s (the chart's appVersion)", c.Image, want)
			}
			// Static membership takes the pod name.
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
			}) {
				t.Error("POD_NAME is not the pod's name")
			}
			// --config is the ConfigMap's file, mounted.
			cm := configMap(t, r, sts.Name)
			if len(c.Args) < 3 || c.Args[0] != "run" || c.Args[1] != "--config" {
				t.Fatalf("args %q", c.Args)
			}
			if !mounted(pod.Spec, c, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == cm.Name }, c.Args[2], cm.Data) {
				t.Errorf("--config %s is not a key of the mounted ConfigMap %s", c.Args[2], cm.Name)
			}
			// Probes on the metrics port.
			for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz", c.StartupProbe: "/healthz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "metrics" {
					t.Errorf("probe %v, want GET %s on metrics", probe, path)
				}
			}
			// Non-root, read-only root filesystem, no privileges.
			psc, sc := pod.Spec.SecurityContext, c.SecurityContext
			if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 65532 || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Error("pod must run as the non-root user 65532, the image's")
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Error("container must have a read-only root filesystem and no privilege escalation")
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("resources %v", c.Resources)
			}
			// Every Secret referenced is made by the chart or named in the
			// values (existingSecret); the chart's own hold the keys asked.
			made := map[string]*corev1.Secret{}
			for _, o := range r.all(t, &corev1.Secret{}) {
				s := o.(*corev1.Secret)
				made[s.Name] = s
			}
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if s := made[ref.Name]; s != nil {
					if _, ok := s.StringData[ref.Key]; !ok {
						t.Errorf("%s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
					}
				} else if !strings.Contains(readFile(t, values), "existingSecret: "+ref.Name) {
					t.Errorf("%s: Secret %s is neither made by the chart nor named in the values", e.Name, ref.Name)
				}
			}
			checkExact(t, sts, c)
			for _, o := range r.all(t, &monitoringv1.ServiceMonitor{}) {
				sm := o.(*monitoringv1.ServiceMonitor)
				if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) ||
					len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" {
					t.Errorf("ServiceMonitor %v does not scrape the Service's metrics port", sm.Spec)
				}
			}
			for _, o := range r.all(t, &monitoringv1.PrometheusRule{}) {
				checkRules(t, r.text[o], alerts, o.(*monitoringv1.PrometheusRule))
			}
			for _, o := range r.all(t, &corev1.ConfigMap{}) {
				if d, ok := o.(*corev1.ConfigMap).Data["bloomgate.json"]; ok && d != string(dashboard) {
					t.Error("the dashboard ConfigMap is not deployments/grafana/dashboards/bloomgate.json byte for byte")
				}
			}
			for _, o := range r.all(t, &ScaledObject{}) {
				so := o.(*ScaledObject)
				if ref := so.Spec.ScaleTargetRef; ref.Kind != "StatefulSet" || ref.APIVersion != "apps/v1" || ref.Name != sts.Name {
					t.Errorf("ScaledObject targets %v, want the StatefulSet %s", ref, sts.Name)
				}
				if sts.Spec.Replicas != nil {
					t.Error("the StatefulSet sets replicas while KEDA scales it: each upgrade would reset them")
				}
				if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" || so.Spec.Triggers[0].Metadata["lagThreshold"] == "" {
					t.Errorf("triggers %v", so.Spec.Triggers)
				}
				if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil || *so.Spec.MinReplicaCount > *so.Spec.MaxReplicaCount {
					t.Errorf("replica counts %v..%v", so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount)
				}
			}
		})
	}
	// Between them, the examples make every kind the chart can.
	for _, newObj := range kinds {
		if k := fmt.Sprintf("%T", newObj()); !seen[k] {
			t.Errorf("no values example renders a %s", k)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func configMap(t *testing.T, r rendered, name string) *corev1.ConfigMap {
	t.Helper()
	for _, o := range r.all(t, &corev1.ConfigMap{}) {
		if cm := o.(*corev1.ConfigMap); cm.Name == name {
			return cm
		}
	}
	t.Fatalf("no ConfigMap %s", name)
	return nil
}

// mounted: path is a file of a volume chosen by pick, mounted in c.
func mounted(pod corev1.PodSpec, c corev1.Container, pick func(corev1.Volume) bool, path string, data map[string]string) bool {
	for _, v := range pod.Volumes {
		if !pick(v) {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				if _, ok := data[strings.TrimPrefix(path, m.MountPath+"/")]; ok && strings.HasPrefix(path, m.MountPath+"/") {
					return true
				}
			}
		}
	}
	return false
}

// checkExact: with BLOOMGATE_EXACT, BLOOMGATE_EXACT_DIR is a mounted
// writable volume (an emptyDir or a claim template of the StatefulSet).
func checkExact(t *testing.T, sts *appsv1.StatefulSet, c corev1.Container) {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["BLOOMGATE_EXACT"] != "true" {
		return
	}
	dir := env["BLOOMGATE_EXACT_DIR"]
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir || m.ReadOnly {
			continue
		}
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
				return
			}
		}
		for _, pvc := range sts.Spec.VolumeClaimTemplates {
			if pvc.Name == m.Name && !pvc.Spec.Resources.Requests.Storage().IsZero() {
				return
			}
		}
	}
	t.Errorf("exact mode: %s is not a mounted, sized, writable volume", dir)
}

// checkRules: the PrometheusRule's spec is alerts.yml byte for byte
// (indented under spec:), and decodes into the Operator's rule groups.
func checkRules(t *testing.T, text string, alerts []byte, pr *monitoringv1.PrometheusRule) {
	_, spec, ok := strings.Cut(text, "\nspec:\n")
	if !ok {
		t.Fatal("PrometheusRule without spec")
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(strings.TrimRight(spec, "\n")+"\n", "\n") {
		if line == "" {
			continue
		}
		b.WriteString(strings.TrimPrefix(line, "  "))
	}
	if got := strings.TrimRight(b.String(), "\n"); got != strings.TrimRight(string(alerts), "\n") {
		t.Error("the PrometheusRule's spec is not deployments/prometheus/alerts.yml byte for byte")
	}
	n := 0
	for _, g := range pr.Spec.Groups {
		n += len(g.Rules)
	}
	if want := strings.Count(string(alerts), "- alert: "); n != want || n == 0 {
		t.Errorf("PrometheusRule has %d rules, alerts.yml %d", n, want)
	}
}

// TestChartVersion: the chart is the release's, and so is the kustomize
// base's image; the chart's alert and dashboard files are links to the
// shipped ones, not copies.
func TestChartVersion(t *testing.T) {
	tag := releaseTag(t)
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, chart+"/Chart.yaml")), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != strings.TrimPrefix(tag, "v") || meta.AppVersion != tag {
		t.Errorf("Chart.yaml version %q appVersion %q, want %s and %s", meta.Version, meta.AppVersion, strings.TrimPrefix(tag, "v"), tag)
	}
	var kust struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, root+"/deployments/kubernetes/kustomization.yaml")), &kust); err != nil {
		t.Fatal(err)
	}
	if len(kust.Images) != 1 || kust.Images[0].NewTag != tag {
		t.Errorf("kustomize images %v, want the tag %s", kust.Images, tag)
	}
	for link, target := range map[string]string{
		"files/alerts.yml":     "deployments/prometheus/alerts.yml",
		"files/dashboard.json": "deployments/grafana/dashboards/bloomgate.json",
	} {
		dest, err := os.Readlink(filepath.Join(chart, link))
		if err != nil {
			t.Errorf("%s: %v (want a link to %s)", link, err, target)
			continue
		}
		abs, _ := filepath.Abs(filepath.Join(chart, filepath.Dir(link), dest))
		want, _ := filepath.Abs(filepath.Join(root, target))
		if abs != want {
			t.Errorf("%s links to %s, want %s", link, dest, target)
		}
	}
	if !strings.Contains(readFile(t, filepath.Join(root, "CHANGELOG.md")), "\n## "+strings.TrimPrefix(tag, "v")+" ") {
		t.Errorf("CHANGELOG.md has no section ## %s", strings.TrimPrefix(tag, "v"))
	}
}

// TestChartSchemaRefuses: values.schema.json turns away what the chart
// must not render: unknown values, a mutable tag, settings the chart sets
// itself or that are secrets, a local checkpoint URL, mistyped numbers.
func TestChartSchemaRefuses(t *testing.T) {
	bin := helmPath(t)
	for set, want := range map[string]string{
		"replica=3":                          "additional properties 'replica'",
		"image.tag=latest":                   "/image/tag",
		"config.metrics-addr=:1":             "/config/metrics-addr",
		"config.sasl-password=x":             "/config/sasl-password",
		"config.checkpoint-url=file:///data": "/config/checkpoint-url",
		"inputPartitions=0":                  "/inputPartitions",
		"exact.volume=hostPath":              "/exact/volume",
		"autoscaling.keda.lagThreshold=-1":   "/autoscaling/keda/lagThreshold",
	} {
		t.Run(set, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "template", "bg", chart, "--set", set).CombinedOutput()
			if err == nil || !strings.Contains(string(out), want) {
				t.Errorf("--set %s: %v, want a schema error at %s\n%s", set, err, want, out)
			}
		})
	}
}
