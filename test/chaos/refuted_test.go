package chaos_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// refutedScraper follows, in exact mode, how many of the filters'
// positives the workers' exact stores refuted (false positives the filter
// alone would have made): it reads bloomgate_exact_positives_total from
// every worker's /metrics every 2 s and keeps the newest sum per process.
// What a worker refuted after its last scrape before a SIGKILL is not
// counted: the total is a lower bound.
type refutedScraper struct {
	mu    sync.Mutex
	addrs map[*proc]string
	last  map[*proc]float64
	stop  chan struct{}
	done  chan struct{}
}

func newRefutedScraper() *refutedScraper {
	return &refutedScraper{addrs: map[*proc]string{}, last: map[*proc]float64{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// serving records p's HTTP address from its "serving /, /status.json …"
// log line.
func (r *refutedScraper) serving(p *proc, line string) {
	if addr := parseLogKV(line)["addr"]; addr != "" {
		r.mu.Lock()
		r.addrs[p] = addr
		r.mu.Unlock()
	}
}

// run scrapes until finish is called (bounded: one round every 2 s, each
// request within 1 s).
func (r *refutedScraper) run() {
	defer close(r.done)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.scrapeAll()
		}
	}
}

// finish stops the periodic scrapes and scrapes once more (the workers
// still running give their final counts).
func (r *refutedScraper) finish() float64 {
	close(r.stop)
	<-r.done
	r.scrapeAll()
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum float64
	for _, v := range r.last {
		sum += v
	}
	return sum
}

func (r *refutedScraper) scrapeAll() {
	r.mu.Lock()
	addrs := make(map[*proc]string, len(r.addrs))
	for p, a := range r.addrs {
		addrs[p] = a
	}
	r.mu.Unlock()
	for p, addr := range addrs {
		if v, ok := scrapeRefuted(addr); ok {
			r.mu.Lock()
			r.last[p] = max(r.last[p], v)
			r.mu.Unlock()
		}
	}
}

// scrapeRefuted sums bloomgate_exact_positives_total{result="refuted"} of
// the worker at addr; false when it does not answer.
func scrapeRefuted(addr string) (float64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "bloomgate_exact_positives_total{") || !strings.Contains(line, `result="refuted"`) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum, sc.Err() == nil
}
