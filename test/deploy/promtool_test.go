package deploy

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/proctest"
)

// promtool and prometheus come from Debian's prometheus package, which
// .ci/deps.sh unpacks for `make test`.
var (
	promtoolTool = proctest.Tool{
		Env:   "BLOOMGATE_PROMTOOL",
		Names: []string{"promtool"},
		Skip:  "promtool not found (Debian package prometheus; `make test` fetches it, or set BLOOMGATE_PROMTOOL)",
		Fail:  "promtool not found although BLOOMGATE_REQUIRE_TOOLS=1: run .ci/deps.sh (Debian package prometheus) or set BLOOMGATE_PROMTOOL",
	}
	prometheusTool = proctest.Tool{
		Env:   "BLOOMGATE_PROMETHEUS",
		Names: []string{"prometheus"},
		Skip:  "prometheus not found (Debian package prometheus; `make test` fetches it, or set BLOOMGATE_PROMETHEUS)",
		Fail:  "prometheus not found although BLOOMGATE_REQUIRE_TOOLS=1: run .ci/deps.sh (Debian package prometheus) or set BLOOMGATE_PROMETHEUS",
	}
)

// promtool runs promtool with args in dir and fails t on a non-zero exit.
func promtool(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRulesPromtool: Prometheus' own tool accepts the rules, and
// their unit tests (deployments/prometheus/alerts_test.yml) pass; every
// alert of alerts.yml has a test in which it fires and one evaluation in
// which it is silent.
func TestAlertRulesPromtool(t *testing.T) {
	bin := promtoolTool.Path(t)
	dir := filepath.Join(root, "deployments", "prometheus")
	if out := promtool(t, bin, dir, "check", "rules", "alerts.yml"); !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	if out := promtool(t, bin, dir, "test", "rules", "alerts_test.yml"); !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}

	fires, silent := map[string]bool{}, map[string]bool{}
	tests := yamlDocs(t, "deployments/prometheus/alerts_test.yml")[0]
	if files := list(tests, "rule_files"); len(files) != 1 || files[0] != "alerts.yml" {
		t.Errorf("alerts_test.yml tests %v, want [alerts.yml]", files)
	}
	for _, tc := range list(tests, "tests") {
		for _, a := range list(tc, "alert_rule_test") {
			name := str(a, "alertname")
			if len(list(a, "exp_alerts")) > 0 {
				fires[name] = true
			} else {
				silent[name] = true
			}
		}
	}
	alerts := yamlDocs(t, "deployments/prometheus/alerts.yml")[0]
	n := 0
	for _, g := range list(alerts, "groups") {
		for _, r := range list(g, "rules") {
			name := str(r, "alert")
			n++
			if !fires[name] {
				t.Errorf("%s: no unit test in which it fires", name)
			}
			if !silent[name] {
				t.Errorf("%s: no unit test in which it stays silent", name)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts in alerts.yml")
	}
}
