package deploy

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"
)

const ruleHeader = `# Generated from deployments/prometheus/alerts.yml by test/deploy
# (BLOOMGATE_UPDATE_DOCS=1 go test ./test/deploy -run PrometheusRule);
# edit alerts.yml, not this file.
`

// TestPrometheusRuleMatchesAlerts keeps the Prometheus Operator's copy of
// the alert rules equal to deployments/prometheus/alerts.yml.
func TestPrometheusRuleMatchesAlerts(t *testing.T) {
	alerts := yamlDocs(t, "deployments/prometheus/alerts.yml")[0]
	want := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata":   map[string]any{"name": "bloomgate", "labels": map[string]any{"app.kubernetes.io/name": "bloomgate"}},
		"spec":       map[string]any{"groups": alerts["groups"]},
	}
	const rel = "deployments/kubernetes/prometheusrule.yaml"
	if os.Getenv("BLOOMGATE_UPDATE_DOCS") == "1" {
		var buf bytes.Buffer
		buf.WriteString(ruleHeader)
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(want); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := yamlDocs(t, rel)
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("%s differs from alerts.yml; rerun with BLOOMGATE_UPDATE_DOCS=1", rel)
	}
}
