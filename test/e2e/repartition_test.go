package e2e

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/keys"
	"github.com/bloomgate/bloomgate/internal/proctest"
)

var reRecovered = regexp.MustCompile(`msg="partition recovered"`)

// TestRepartitionCrawler: a crawler frontier whose input is keyed by the
// fetcher, not by the URL, so spellings of one URL land in different
// partitions. `bloomgate run --repartition --normalize url` forwards each
// canonical URL once and loses none, while the process running both stages
// is SIGKILLed three times as the input arrives.
func TestRepartitionCrawler(t *testing.T) {
	kcat := kcatTool.Path(t)
	cpDir := t.TempDir()
	b := start(t, "broker", "broker", "--listen", "127.0.0.1:0",
		"--topic", "links:4", "--topic", "frontier:4", "--topic", "frontier-dups:4")
	brokers := waitFor(t, b, proctest.BrokerListening, 30*time.Second)

	canon, err := keys.NewExtractor("json:url", "url", 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(13, 14))
	spell := func(i int) string {
		host := fmt.Sprintf("site%d.example", i%37)
		switch rng.IntN(4) {
		case 0:
			return fmt.Sprintf("http://%s/p/%d", strings.ToUpper(host), i)
		case 1:
			return fmt.Sprintf("http://%s:80/p/./%d#frag", host, i)
		case 2:
			return fmt.Sprintf("HTTP://%s/p/%d", host, i)
		}
		return fmt.Sprintf("http://%s/p/%d", host, i)
	}
	batch := func(from, to int) []string {
		var lines []string
		for i := from; i < to; i++ {
			for range 1 + rng.IntN(3) { // 1-3 discoveries of the page, by different fetchers
				lines = append(lines, fmt.Sprintf("fetcher-%d\t{\"url\":%q}", rng.IntN(9), spell(i)))
			}
			if i > 0 && rng.IntN(5) == 0 { // a link back to an earlier page
				lines = append(lines, fmt.Sprintf("fetcher-%d\t{\"url\":%q}", rng.IntN(9), spell(rng.IntN(i))))
			}
		}
		return lines
	}
	run := func() *proctest.Proc {
		w := start(t, "worker", "run", "--brokers", brokers, "--group", "crawl",
			"--input", "links", "--output", "frontier", "--duplicates", "frontier-dups",
			"--repartition", "--key", "json:url", "--normalize", "url",
			"--capacity", "100000", "--fpr", "0.000001",
			"--checkpoint-url", "file://"+cpDir, "--checkpoint-interval", "1s",
			"--metrics-addr", "127.0.0.1:0")
		waitFor(t, w, reRecovered, 60*time.Second)
		return w
	}

	const pages = 900
	for round := range 3 {
		produce(t, kcat, brokers, "links", batch(round*pages/3, (round+1)*pages/3))
		w := run()
		time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
		w.Kill() // both stages at once, at a random moment
		w.Wait(10 * time.Second)
	}
	produce(t, kcat, brokers, "links", batch(0, pages/10)) // late rediscoveries only
	w := run()

	in := consume(t, kcat, brokers, "links")
	want := map[string]bool{}
	for _, r := range in {
		k, err := canon.Extract(nil, []byte(r.key), []byte(r.value), nil)
		if err != nil {
			t.Fatalf("test data: %q: %v", r.value, err)
		}
		want[string(k)] = true
	}
	if len(want) != pages {
		t.Fatalf("test data: %d canonical URLs, want %d", len(want), pages)
	}
	outKeys := func() map[string]int {
		got := map[string]int{}
		for _, r := range consume(t, kcat, brokers, "frontier") {
			k, err := canon.Extract(nil, []byte(r.key), []byte(r.value), nil)
			if err != nil {
				t.Fatalf("output record %q: %v", r.value, err)
			}
			got[string(k)]++
		}
		return got
	}
	if err := w.WaitUntil("every canonical URL forwarded", 90*time.Second, 500*time.Millisecond, func() bool {
		return len(outKeys()) >= len(want)
	}); err != nil {
		t.Fatalf("%v: %d of %d canonical URLs forwarded", err, len(outKeys()), len(want))
	}
	stop(t, w, 40*time.Second)

	got := outKeys()
	twice := 0
	for k, n := range got {
		if !want[k] {
			t.Errorf("forwarded %q, which is not in the input", k)
		}
		if n > 1 {
			twice++
		}
	}
	lost := 0
	for k := range want {
		if got[k] == 0 {
			lost++
		}
	}
	t.Logf("%d input records, %d canonical URLs, %d forwarded, %d forwarded more than once, %d lost; %d on the duplicates topic",
		len(in), len(want), len(got), twice, lost, len(consume(t, kcat, brokers, "frontier-dups")))
	if twice > 0 || lost > 0 {
		t.Fatalf("%d canonical URLs forwarded more than once, %d lost; want 0 and 0", twice, lost)
	}
	stop(t, b, 20*time.Second)
}
