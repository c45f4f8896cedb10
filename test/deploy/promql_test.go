package deploy

import (
	"reflect"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`sum by (topic) (rate(bloomgate_records_consumed_total{topic=~"$topic"}[5m]))`, []string{"bloomgate_records_consumed_total"}},
		{`up{job=~".*bloomgate_x.*"} == 0`, []string{"up"}},
		{`histogram_quantile(0.99, sum by (le) (rate(bloomgate_checkpoint_duration_seconds_bucket[1m])))`, []string{"bloomgate_checkpoint_duration_seconds_bucket"}},
		{`sum(process_resident_memory_bytes) / go_memstats_heap_inuse_bytes`, []string{"go_memstats_heap_inuse_bytes", "process_resident_memory_bytes"}},
		{`time() - max(bloomgate_a) > 3 * 60 and bloomgate_a`, []string{"bloomgate_a"}},
	} {
		if got := MetricNames(c.expr); !reflect.DeepEqual(got, c.want) {
			t.Errorf("MetricNames(%q) = %v, want %v", c.expr, got, c.want)
		}
	}
}

func TestBalanced(t *testing.T) {
	for expr, want := range map[string]bool{
		`sum(rate(a{b="("}[5m]))`: true,
		`sum(rate(a[5m])`:         false,
		`a{b="x"]`:                false,
		`(a)]`:                    false,
	} {
		if got := Balanced(expr); got != want {
			t.Errorf("Balanced(%q) = %v", expr, got)
		}
	}
}

func TestExported(t *testing.T) {
	fams := Families("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\n# TYPE s summary\n# TYPE c counter\nc 1\n")
	for name, want := range map[string]bool{
		"h": true, "h_bucket": true, "h_sum": true, "h_count": true,
		"s_sum": true, "s_bucket": false, "c": true, "c_bucket": false, "c_total": false, "up": true, "x": false,
	} {
		if got := Exported(name, fams); got != want {
			t.Errorf("Exported(%q) = %v", name, got)
		}
	}
}
