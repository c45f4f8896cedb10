package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/bloom"
)

// dockerInstructions splits a Dockerfile into instructions (continuations
// joined, comments dropped), each with the index of its stage.
func dockerInstructions(src string) (ins []string, stage []int) {
	var cur strings.Builder
	n := -1
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		in := cur.String()
		cur.Reset()
		if strings.HasPrefix(strings.ToUpper(in), "FROM ") {
			n++
		}
		ins = append(ins, in)
		stage = append(stage, n)
	}
	return ins, stage
}

func TestDockerfile(t *testing.T) {
	ins, stage := dockerInstructions(string(repoFile(t, "deployments/Dockerfile")))
	var froms []string
	final := map[string][]string{} // instruction keyword → arguments, final stage
	var build []string
	last := stage[len(stage)-1]
	for i, in := range ins {
		kw, args, _ := strings.Cut(in, " ")
		kw = strings.ToUpper(kw)
		if kw == "FROM" {
			froms = append(froms, args)
		}
		if stage[i] == last {
			final[kw] = append(final[kw], args)
		} else if stage[i] >= 0 {
			build = append(build, in)
		}
	}
	if len(froms) != 2 {
		t.Fatalf("stages %q, want a build and a runtime stage", froms)
	}
	if !regexp.MustCompile(`^(--platform=\S+ )?golang:\$\{GO_VERSION\}-\S+ AS build$`).MatchString(froms[0]) {
		t.Errorf("build stage %q: want golang:${GO_VERSION}-… AS build", froms[0])
	}
	if froms[1] != "gcr.io/distroless/static-debian12:nonroot AS runtime" {
		t.Errorf("runtime stage %q", froms[1])
	}
	// The Go version of the builder follows go.mod.
	goMod := string(repoFile(t, "go.mod"))
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(goMod)
	if m == nil || !slices.Contains(ins, "ARG GO_VERSION="+m[1]) {
		t.Errorf("ARG GO_VERSION must be go.mod's %v", m)
	}
	buildText := strings.Join(build, "\n")
	for _, want := range []string{
		"--mount=type=cache,target=/go/pkg/mod", "CGO_ENABLED=0", "go build -trimpath -tags nodev",
		"-X github.com/bloomgate/bloomgate/internal/buildinfo.Version=${VERSION}", "ARG VERSION=", "./cmd/bloomgate",
	} {
		if !strings.Contains(buildText, want) {
			t.Errorf("build stage lacks %q", want)
		}
	}
	if got := final["USER"]; len(got) != 1 || strings.HasPrefix(got[0], "0") || strings.HasPrefix(got[0], "root") {
		t.Errorf("runtime USER %q: want one non-root user", got)
	}
	if got := final["ENTRYPOINT"]; !slices.Equal(got, []string{`["/bloomgate"]`}) {
		t.Errorf("ENTRYPOINT %q", got)
	}
	if got := final["CMD"]; !slices.Equal(got, []string{`["run"]`}) {
		t.Errorf("CMD %q", got)
	}
	if got := final["COPY"]; len(got) != 1 || got[0] != "--from=build /out/bloomgate /bloomgate" {
		t.Errorf("runtime COPY %q: want only the binary", got)
	}
	if got := final["EXPOSE"]; !slices.Equal(got, []string{"9464"}) {
		t.Errorf("EXPOSE %q, want 9464", got)
	}
	if len(final["RUN"]) > 0 {
		t.Errorf("runtime stage runs %q: distroless has no shell", final["RUN"])
	}
	// The image's environment sets real settings, and the metrics endpoint
	// listens beyond the container's loopback.
	known := envNames()
	env := map[string]string{}
	for _, e := range final["ENV"] {
		for _, kv := range strings.Fields(e) {
			k, v, _ := strings.Cut(kv, "=")
			if _, ok := known[k]; !ok {
				t.Errorf("ENV %s is not a bloomgate setting", k)
			}
			env[k] = v
		}
	}
	if env["BLOOMGATE_METRICS_ADDR"] != ":9464" {
		t.Errorf("BLOOMGATE_METRICS_ADDR %q, want :9464", env["BLOOMGATE_METRICS_ADDR"])
	}
	// The build context keeps what the build stage copies.
	ignore := string(repoFile(t, "deployments/Dockerfile.dockerignore"))
	for _, keep := range []string{"!go.mod", "!go.sum", "!cmd/", "!internal/"} {
		if !strings.Contains(ignore, keep) {
			t.Errorf("Dockerfile.dockerignore lacks %s", keep)
		}
	}
}

func TestCompose(t *testing.T) {
	docs := yamlDocs(t, "docker-compose.yml")
	if len(docs) != 1 {
		t.Fatalf("%d documents", len(docs))
	}
	services, _ := docs[0]["services"].(map[string]any)
	for _, name := range []string{"kafka", "kafka-init", "minio", "minio-init", "bloomgate", "loadgen", "prometheus", "grafana"} {
		if services[name] == nil {
			t.Errorf("service %s missing", name)
		}
	}
	for name, s := range services {
		img := str(s, "image")
		if img == "" && dig(s, "build") == nil {
			t.Errorf("%s: no image and no build", name)
		}
		if img != "" && img != "bloomgate:local" && (!strings.Contains(img, ":") || strings.HasSuffix(img, ":latest")) {
			t.Errorf("%s: image %q not pinned", name, img)
		}
		deps := dig(s, "depends_on")
		var depNames []string
		switch d := deps.(type) {
		case []any:
			for _, x := range d {
				depNames = append(depNames, x.(string))
			}
		case map[string]any:
			for k := range d {
				depNames = append(depNames, k)
			}
		}
		for _, d := range depNames {
			if services[d] == nil {
				t.Errorf("%s depends on unknown service %s", name, d)
			}
		}
		for _, v := range list(s, "volumes") {
			src, _, _ := strings.Cut(v.(string), ":")
			if strings.HasPrefix(src, "./") && !exists(src) {
				t.Errorf("%s mounts %s, which does not exist", name, src)
			}
		}
		for _, p := range list(s, "ports") {
			if !strings.HasPrefix(p.(string), "127.0.0.1:") {
				t.Errorf("%s publishes %q beyond localhost", name, p)
			}
		}
	}
	bg := services["bloomgate"]
	if df := str(bg, "build", "dockerfile"); !exists(df) {
		t.Errorf("bloomgate build dockerfile %q does not exist", df)
	}
	if dig(bg, "read_only") != true || str(bg, "user") != "65532:65532" {
		t.Errorf("bloomgate must run read-only as 65532")
	}
	// bloomgate's environment is a valid configuration.
	known := envNames()
	env := map[string]string{}
	for k, v := range dig(bg, "environment").(map[string]any) {
		if strings.HasPrefix(k, "BLOOMGATE_") {
			if _, ok := known[k]; !ok {
				t.Errorf("bloomgate environment: %s is not a setting", k)
			}
			env[k] = fmt.Sprint(v)
		}
	}
	cfg := loadConfig(t, "", env)
	if !strings.HasPrefix(cfg.CheckpointURL, "s3://") {
		t.Errorf("compose checkpoints go to %s, want the MinIO bucket", cfg.CheckpointURL)
	}
	if u, err := url.Parse(cfg.CheckpointURL); err != nil || !strings.Contains(list(services["minio-init"], "command")[0].(string), "mc mb --ignore-existing local/"+u.Host+"\n") {
		t.Errorf("minio-init does not create the bucket of %s", cfg.CheckpointURL)
	}
	// The topics bloomgate reads and writes are created, input and output
	// with the same partition count (--partitioning same).
	initCmd := list(services["kafka-init"], "command")[0].(string)
	parts := map[string]int{}
	for _, m := range regexp.MustCompile(`([a-z-]+):(\d+)`).FindAllStringSubmatch(initCmd, -1) {
		parts[m[1]], _ = strconv.Atoi(m[2])
	}
	for _, topic := range []string{cfg.Input, cfg.Output, cfg.Duplicates, cfg.DeadLetter} {
		if topic != "" && parts[topic] == 0 {
			t.Errorf("kafka-init does not create topic %s", topic)
		}
	}
	if parts[cfg.Input] != parts[cfg.Output] {
		t.Errorf("input %d partitions, output %d", parts[cfg.Input], parts[cfg.Output])
	}
	if g := str(bg, "stop_grace_period"); g != "" {
		d, err := time.ParseDuration(g)
		if err != nil || d <= cfg.ShutdownTimeout {
			t.Errorf("stop_grace_period %s must exceed shutdown-timeout %v", g, cfg.ShutdownTimeout)
		}
	}
	// Prometheus scrapes the port bloomgate listens on.
	_, port, _ := net.SplitHostPort(cfg.MetricsAddr)
	prom := yamlDocs(t, "deployments/prometheus/prometheus.yml")[0]
	var targets []string
	for _, sc := range list(prom, "scrape_configs") {
		if str(sc, "job_name") == "bloomgate" {
			for _, tg := range list(sc, "static_configs", "0", "targets") {
				targets = append(targets, tg.(string))
			}
		}
	}
	if !slices.Contains(targets, "bloomgate:"+port) {
		t.Errorf("prometheus targets %q, want bloomgate:%s", targets, port)
	}
	if rf := list(prom, "rule_files"); len(rf) != 1 || rf[0] != "/etc/prometheus/alerts.yml" {
		t.Errorf("rule_files %v", rf)
	}
	// Grafana's provisioning points at the mounted dashboards.
	provider := yamlDocs(t, "deployments/grafana/provisioning/dashboards/bloomgate.yml")[0]
	if p := str(provider, "providers", "0", "options", "path"); !slices.Contains(list(services["grafana"], "volumes"), any("./deployments/grafana/dashboards:"+p+":ro")) {
		t.Errorf("dashboard provider path %s is not the compose mount", p)
	}
	ds := yamlDocs(t, "deployments/grafana/provisioning/datasources/prometheus.yml")[0]
	if str(ds, "datasources", "0", "url") != "http://prometheus:9090" || str(ds, "datasources", "0", "uid") != "prometheus" {
		t.Errorf("data source %v", ds)
	}
	// The load generator's flags exist (help of the built binary).
	help := binaryOutput(t, "loadgen", "--help")
	cmd := list(services["loadgen"], "command")
	if len(cmd) == 0 || cmd[0] != "loadgen" {
		t.Fatalf("loadgen command %v", cmd)
	}
	for _, a := range cmd[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a.(string), "-"), "=")
		if !strings.Contains(help, "-"+name+" ") && !strings.Contains(help, "-"+name+"\n") {
			t.Errorf("loadgen has no flag --%s", name)
		}
	}
}

// k8sDocs reads the kustomize base: every resource listed, by kind.
func k8sDocs(t *testing.T) (kustomization map[string]any, byKind map[string]map[string]any) {
	t.Helper()
	const dir = "deployments/kubernetes"
	kustomization = yamlDocs(t, dir+"/kustomization.yaml")[0]
	byKind = map[string]map[string]any{}
	want := map[string]string{
		"ServiceAccount": "v1", "Deployment": "apps/v1", "Service": "v1",
		"PodDisruptionBudget": "policy/v1", "ServiceMonitor": "monitoring.coreos.com/v1",
		"PrometheusRule": "monitoring.coreos.com/v1",
	}
	for _, r := range list(kustomization, "resources") {
		for _, d := range yamlDocs(t, filepath.Join(dir, r.(string))) {
			kind := str(d, "kind")
			if api, ok := want[kind]; !ok || str(d, "apiVersion") != api {
				t.Errorf("%s: %s %s: unexpected kind or apiVersion", r, str(d, "apiVersion"), kind)
			}
			if str(d, "metadata", "name") == "" {
				t.Errorf("%s: %s without metadata.name", r, kind)
			}
			if byKind[kind] != nil {
				t.Errorf("two %s", kind)
			}
			byKind[kind] = d
		}
	}
	for kind := range want {
		if byKind[kind] == nil {
			t.Errorf("no %s in the base", kind)
		}
	}
	return kustomization, byKind
}

func matches(selector, labels any) bool {
	sel, _ := selector.(map[string]any)
	lab, _ := labels.(map[string]any)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lab[k] != v {
			return false
		}
	}
	return true
}

func TestKubernetes(t *testing.T) {
	kust, k := k8sDocs(t)
	dep, svc, pdb, sm := k["Deployment"], k["Service"], k["PodDisruptionBudget"], k["ServiceMonitor"]
	if t.Failed() {
		t.FailNow()
	}
	podLabels := dig(dep, "spec", "template", "metadata", "labels")
	if !matches(dig(dep, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("Deployment selector does not match its pod labels")
	}
	if !matches(dig(svc, "spec", "selector"), podLabels) || !matches(dig(pdb, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("Service or PDB selector does not match the pods")
	}
	if !matches(dig(sm, "spec", "selector", "matchLabels"), dig(svc, "metadata", "labels")) {
		t.Error("ServiceMonitor selector does not match the Service")
	}
	if dig(pdb, "spec", "maxUnavailable") != 1 {
		t.Errorf("PDB maxUnavailable %v", dig(pdb, "spec", "maxUnavailable"))
	}
	pod := dig(dep, "spec", "template", "spec")
	c := dig(pod, "containers", "0")
	if str(c, "image") != "bloomgate" || str(kust, "images", "0", "name") != "bloomgate" {
		t.Error("container image is not the kustomize image name bloomgate")
	}

	// Config: the ConfigMap file, mounted where --config points, is a
	// valid configuration (secrets come from the environment).
	args := list(c, "args")
	if len(args) != 3 || args[0] != "run" || args[1] != "--config" {
		t.Fatalf("args %v, want run --config FILE", args)
	}
	cmName := str(kust, "configMapGenerator", "0", "name")
	file, src, _ := strings.Cut(str(kust, "configMapGenerator", "0", "files", "0"), "=")
	var mountPath string
	for _, v := range list(pod, "volumes") {
		if str(v, "configMap", "name") == cmName {
			for _, m := range list(c, "volumeMounts") {
				if str(m, "name") == str(v, "name") {
					mountPath = str(m, "mountPath")
				}
			}
		}
	}
	if mountPath == "" || args[2] != mountPath+"/"+file {
		t.Errorf("--config %v is not the mounted ConfigMap %s (%s/%s)", args[2], cmName, mountPath, file)
	}
	// The SASL password comes from a Secret (checked below).
	cfg := loadConfig(t, filepath.Join(root, "deployments/kubernetes", src), map[string]string{"BLOOMGATE_SASL_PASSWORD": "from-secret"})

	// Environment: real settings; secrets from Secrets.
	known := envNames()
	secretEnv := map[string]string{}
	for _, e := range list(c, "env") {
		name := str(e, "name")
		if strings.HasPrefix(name, "BLOOMGATE_") {
			if _, ok := known[name]; !ok {
				t.Errorf("env %s is not a setting", name)
			}
		}
		if ref := str(e, "valueFrom", "secretKeyRef", "name"); ref != "" {
			secretEnv[name] = ref
		}
		if name == "BLOOMGATE_METRICS_ADDR" {
			cfg.MetricsAddr = str(e, "value")
		}
	}
	for _, name := range []string{"BLOOMGATE_SASL_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if secretEnv[name] == "" {
			t.Errorf("%s does not come from a Secret", name)
		}
	}
	examples := map[string]bool{}
	for _, d := range yamlDocs(t, "deployments/kubernetes/secret.example.yaml") {
		for k := range dig(d, "stringData").(map[string]any) {
			examples[str(d, "metadata", "name")+"/"+k] = true
		}
	}
	for name, secret := range secretEnv {
		if !examples[secret+"/"+name] {
			t.Errorf("secret.example.yaml lacks %s/%s", secret, name)
		}
	}

	// Ports and probes match the binary's endpoint.
	_, port, err := net.SplitHostPort(cfg.MetricsAddr)
	if err != nil || port != "9464" {
		t.Fatalf("metrics-addr %q", cfg.MetricsAddr)
	}
	if str(c, "ports", "0", "name") != "metrics" || fmt.Sprint(dig(c, "ports", "0", "containerPort")) != port {
		t.Errorf("container port %v, want metrics %s", dig(c, "ports", "0"), port)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if str(c, probe, "httpGet", "path") != path || str(c, probe, "httpGet", "port") != "metrics" {
			t.Errorf("%s: %v, want GET %s on port metrics", probe, dig(c, probe), path)
		}
	}
	if str(svc, "spec", "ports", "0", "targetPort") != "metrics" || str(sm, "spec", "endpoints", "0", "port") != str(svc, "spec", "ports", "0", "name") {
		t.Error("Service/ServiceMonitor ports do not lead to the metrics port")
	}
	if str(sm, "spec", "endpoints", "0", "path") != "/metrics" {
		t.Error("ServiceMonitor path is not /metrics")
	}

	// Shutdown: the grace period covers the ordered shutdown.
	grace, _ := dig(pod, "terminationGracePeriodSeconds").(int)
	if time.Duration(grace)*time.Second <= cfg.ShutdownTimeout+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d must exceed shutdown-timeout %v by > 10s", grace, cfg.ShutdownTimeout)
	}

	// Security: non-root, read-only root filesystem, no privileges.
	if dig(pod, "securityContext", "runAsNonRoot") != true || dig(pod, "securityContext", "runAsUser") != 65532 {
		t.Error("pod must run as non-root user 65532")
	}
	if dig(c, "securityContext", "readOnlyRootFilesystem") != true || dig(c, "securityContext", "allowPrivilegeEscalation") != false ||
		!slices.Contains(list(c, "securityContext", "capabilities", "drop"), any("ALL")) {
		t.Error("container must have a read-only root filesystem, no privilege escalation, no capabilities")
	}
	if strings.HasPrefix(cfg.CheckpointURL, "file://") {
		t.Errorf("checkpoint-url %s: the root filesystem is read-only and pods are replaced; use s3://", cfg.CheckpointURL)
	}

	// Memory: the request covers the filters of the most partitions a pod
	// holds, each with one generation of copy-on-write headroom.
	partitions, err1 := strconv.Atoi(str(dep, "metadata", "annotations", "bloomgate.dev/sizing-input-partitions"))
	perPod, err2 := strconv.Atoi(str(dep, "metadata", "annotations", "bloomgate.dev/sizing-max-partitions-per-pod"))
	replicas, _ := dig(dep, "spec", "replicas").(int)
	if err1 != nil || err2 != nil || replicas < 2 || perPod < (partitions+replicas-2)/(replicas-1) {
		t.Fatalf("sizing annotations: %d partitions, %d per pod, %d replicas: a pod must hold partitions/(replicas-1)", partitions, perPod, replicas)
	}
	capacity := (cfg.Capacity + uint64(partitions) - 1) / uint64(partitions)
	plan := bloom.Config(cfg.Params)
	plan.Capacity = capacity
	sz, err := PartitionSizing(plan)
	if err != nil {
		t.Fatal(err)
	}
	need := uint64(perPod)*(sz.Bytes+sz.GenerationBytes) + BaselineBytes
	req, err := quantity(str(c, "resources", "requests", "memory"))
	if err != nil {
		t.Fatal(err)
	}
	limit, err := quantity(str(c, "resources", "limits", "memory"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("per partition: %d keys, %.1f MiB (%.1f bits/key); %d partitions per pod need %.0f MiB; request %d MiB, limit %d MiB",
		capacity, float64(sz.Bytes)/(1<<20), sz.BitsPerKey, perPod, float64(need)/(1<<20), req>>20, limit>>20)
	if req < need {
		t.Errorf("memory request %d MiB < %.0f MiB needed", req>>20, float64(need)/(1<<20))
	}
	if limit < req || limit > 4*req {
		t.Errorf("memory limit %d MiB: want between the request and 4× it", limit>>20)
	}
	if str(c, "resources", "requests", "cpu") == "" {
		t.Error("no CPU request")
	}
}

func TestAlertRules(t *testing.T) {
	doc := yamlDocs(t, "deployments/prometheus/alerts.yml")[0]
	groups := list(doc, "groups")
	if len(groups) == 0 {
		t.Fatal("no rule groups")
	}
	seen := map[string]bool{}
	for _, g := range groups {
		for _, r := range list(g, "rules") {
			name := str(r, "alert")
			expr := str(r, "expr")
			if name == "" || expr == "" || seen[name] {
				t.Errorf("rule %q: needs a unique alert name and an expr", name)
			}
			seen[name] = true
			if !Balanced(expr) || len(MetricNames(expr)) == 0 {
				t.Errorf("%s: expr %q unbalanced or names no metric", name, expr)
			}
			if sev := str(r, "labels", "severity"); sev != "warning" && sev != "critical" {
				t.Errorf("%s: severity %q", name, sev)
			}
			if str(r, "annotations", "summary") == "" || str(r, "annotations", "description") == "" {
				t.Errorf("%s: summary and description needed", name)
			}
			if f := str(r, "for"); f != "" {
				if _, err := time.ParseDuration(f); err != nil {
					t.Errorf("%s: for %q: %v", name, f, err)
				}
			}
		}
	}
	for _, want := range []string{
		"BloomgateEstimatedFPRAboveTarget", "BloomgateCheckpointStale", "BloomgateOverflowStacking",
		"BloomgateDeadLetterRate", "BloomgateLagGrowing", "BloomgatePartitionStalled", "BloomgateCheckpointKeysForgotten", "BloomgateCheckpointGenerationsRebuilt",
	} {
		if !seen[want] {
			t.Errorf("alert %s missing", want)
		}
	}
}

func TestDashboard(t *testing.T) {
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr       string `json:"expr"`
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(repoFile(t, "deployments/grafana/dashboards/bloomgate.json"), &dash); err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	var titles []string
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		titles = append(titles, p.Title)
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if !Balanced(tg.Expr) || len(MetricNames(tg.Expr)) == 0 || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: query %q", p.Title, tg.Expr)
			}
		}
	}
	all := strings.ToLower(strings.Join(titles, "\n"))
	for _, want := range []string{"in / out", "duplicate ratio", "dead-lettered", "false-positive", "fill", "generations",
		"overflow", "checkpoint age", "checkpoint duration", "restore", "replayed", "lag", "rebalances"} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel about %q", want)
		}
	}
}

// referencedMetrics is every metric name in the dashboard and the rules.
func referencedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	refs := map[string][]string{}
	for _, r := range list(yamlDocs(t, "deployments/prometheus/alerts.yml")[0], "groups", "0", "rules") {
		for _, n := range MetricNames(str(r, "expr")) {
			refs[n] = append(refs[n], "alert "+str(r, "alert"))
		}
	}
	var dash map[string]any
	if err := json.Unmarshal(repoFile(t, "deployments/grafana/dashboards/bloomgate.json"), &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range list(dash, "panels") {
		for _, tg := range list(p, "targets") {
			for _, n := range MetricNames(str(tg, "expr")) {
				refs[n] = append(refs[n], "panel "+str(p, "title"))
			}
		}
	}
	for _, v := range list(dash, "templating", "list") {
		q, _ := dig(v, "definition").(string)
		for _, n := range MetricNames(q) {
			refs[n] = append(refs[n], "variable "+str(v, "name"))
		}
	}
	return refs
}
