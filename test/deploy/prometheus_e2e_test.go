package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bloomgate/bloomgate/internal/broker"
	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/proctest"
)

// shortRules writes alerts.yml with every `for:` shortened to forDur, for
// an end-to-end test that cannot wait minutes.
func shortRules(t *testing.T, path, forDur string) {
	t.Helper()
	doc := yamlDocs(t, "deployments/prometheus/alerts.yml")[0]
	for _, g := range list(doc, "groups") {
		for _, r := range list(g, "rules") {
			if m, ok := r.(map[string]any); ok && m["for"] != nil {
				m["for"] = forDur
			}
		}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// promAlert is an alert as Prometheus' /api/v1/alerts lists it.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func promAlerts(addr string) ([]promAlert, error) {
	body, err := httpGet(addr, "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	var res struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || res.Status != "success" {
		return nil, fmt.Errorf("alerts answer %q: %v", body, err)
	}
	return res.Data.Alerts, nil
}

// TestAlertFiresInPrometheus: a real Prometheus (Debian's binary, on
// 127.0.0.1, scraping every second) scrapes a running `bloomgate run`
// through a fault: partition 0 of the input holds a record its output
// topic refuses (max.message.bytes 2000, no dead-letter topic: the
// partition stalls before it). With the shipped rules, their `for:`
// shortened to 2s, BloomgatePartitionStalled fires for partition 0 and
// for no other, and BloomgateDown stays silent.
func TestAlertFiresInPrometheus(t *testing.T) {
	prom := prometheusTool.Path(t)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := broker.New(broker.Config{Listen: "127.0.0.1:0", Topics: []broker.TopicSpec{{Name: "orders", Partitions: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	brokerDone := make(chan struct{})
	go func() { _ = b.Run(ctx); close(brokerDone) }()
	t.Cleanup(func() { cancel(); b.Close(); <-brokerDone })
	if err := b.Cluster().CreateTopic("orders-out", 2, map[string]string{"max.message.bytes": "2000"}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	w := proctest.Start(t, proctest.Config{Name: "bloomgate run", Path: binary, Args: []string{"run",
		"--brokers", b.Addr(), "--input", "orders", "--output", "orders-out", "--key", "key",
		"--checkpoint-url", "file://" + filepath.Join(dir, "checkpoints"), "--checkpoint-interval", "1s",
		"--metrics-addr", "127.0.0.1:0", "--shutdown-timeout", "5s"},
		Env: slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "BLOOMGATE_") }),
	})
	addr, err := w.WaitFor(regexp.MustCompile(`msg="serving [^"]*/metrics[^"]*" addr=(\S+)`), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// Partition 0: 10 records, then one of 10 kB, then 10 more; partition 1: 20 records.
	ts := time.Now()
	var evs []kafkatest.Event
	for i := range 20 {
		if i == 10 {
			evs = append(evs, kafkatest.Event{Partition: 0, Key: []byte("big"), Value: strings.Repeat("x", 10_000), TS: ts})
		}
		evs = append(evs, kafkatest.Event{Partition: 0, Key: fmt.Appendf(nil, "a-%d", i), Value: "v", TS: ts},
			kafkatest.Event{Partition: 1, Key: fmt.Appendf(nil, "b-%d", i), Value: "v", TS: ts})
	}
	kafkatest.Produce(t, []string{b.Addr()}, "orders", evs)

	rules := filepath.Join(dir, "rules.yml")
	shortRules(t, rules, "2s")
	promAddr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: bloomgate
    static_configs:
      - targets: [%q]
`, rules, addr)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := proctest.Start(t, proctest.Config{Name: "prometheus", Path: prom, Args: []string{
		"--config.file=" + cfgPath, "--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=" + promAddr}})
	if err := p.WaitUntil("prometheus ready", 30*time.Second, 100*time.Millisecond, func() bool {
		_, err := httpGet(promAddr, "/-/ready")
		return err == nil
	}); err != nil {
		t.Fatal(err)
	}

	var alerts []promAlert
	firing := func(name, partition string) bool {
		for _, a := range alerts {
			if a.Labels["alertname"] == name && a.State == "firing" && a.Labels["topic"] == "orders" && a.Labels["partition"] == partition {
				return true
			}
		}
		return false
	}
	err = p.WaitUntil("BloomgatePartitionStalled firing for orders/0", 90*time.Second, 500*time.Millisecond, func() bool {
		alerts, err = promAlerts(promAddr)
		return err == nil && firing("BloomgatePartitionStalled", "0")
	})
	if err != nil {
		body, _ := httpGet(addr, "/status.json")
		t.Fatalf("%v; alerts %+v\nworker status: %s\nworker log:\n%s", err, alerts, body, w.Tail(40))
	}
	if firing("BloomgatePartitionStalled", "1") {
		t.Errorf("BloomgatePartitionStalled fires for the healthy partition 1: %+v", alerts)
	}
	for _, a := range alerts {
		if a.Labels["alertname"] == "BloomgateDown" {
			t.Errorf("BloomgateDown while the worker is scraped: %+v", a)
		}
	}
	t.Logf("BloomgatePartitionStalled fired %s after the test started; alerts: %+v", time.Since(start).Round(100*time.Millisecond), alerts)
}
