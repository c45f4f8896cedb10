// Package statuspage serves a human-readable status page of a worker: one
// self-contained HTML document (inline CSS, no scripts, no external assets)
// that reloads itself every few seconds, and the same data as JSON.
//
// Cost: each request takes one worker.Status snapshot (a copy under the
// worker's lock) and renders it; nothing runs between requests.
package statuspage

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/bloomgate/bloomgate/internal/worker"
)

// RefreshSeconds is how often the page reloads itself.
const RefreshSeconds = 5

//go:embed page.html
var files embed.FS

var page = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"count":    countOf,
	"rate":     rate,
	"percent":  percent,
	"barWidth": barWidth,
	"bytes":    byteSize,
	"offset":   offset,
	"age":      age,
}).ParseFS(files, "page.html"))

// view is what the template renders.
type view struct {
	worker.Status
	Now       time.Time
	Refresh   int
	TotalRate float64
	TotalLag  int64
}

// Handler serves GET / (the HTML page) and GET /status.json (status() as
// JSON, encoded as the worker's own /status.json). status is called once
// per request and must be safe for concurrent use, as (*worker.Worker).Status
// is. Other paths answer 404, so the handler can be mounted next to the
// worker's /metrics, /healthz and /readyz:
//
//	mux.Handle("/", w.Handler(reg))
//	mux.Handle("GET /{$}", statuspage.Handler(w.Status))
func Handler(status func() worker.Status) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(rw http.ResponseWriter, _ *http.Request) {
		st := status()
		v := view{Status: st, Now: time.Now(), Refresh: RefreshSeconds}
		for _, p := range st.Partitions {
			v.TotalRate += p.Rate
			v.TotalLag += p.Lag
		}
		var buf bytes.Buffer
		if err := page.Execute(&buf, v); err != nil {
			http.Error(rw, fmt.Sprintf("rendering status page: %v", err), http.StatusInternalServerError)
			return
		}
		h := rw.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Everything is inline: forbid anything else, scripts included.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = rw.Write(buf.Bytes())
	})
	mux.HandleFunc("GET /status.json", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
	return mux
}
