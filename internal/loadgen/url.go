package loadgen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

var sections = []string{"products", "blog", "news", "docs", "shop", "forum", "wiki", "events"}
var colors = []string{"red", "blue", "green", "black", "white"}

// urlParts are the pieces of the canonical URL of a key ID.
type urlParts struct {
	scheme, host, path string
	query              [][2]string // sorted by name
}

func urlOf(id uint64) urlParts {
	scheme := "https"
	if id%5 == 0 {
		scheme = "http"
	}
	return urlParts{
		scheme: scheme,
		host:   "shop" + strconv.FormatUint(id%500, 10) + ".example.com",
		path:   "/" + sections[(id/500)%uint64(len(sections))] + "/item-" + strconv.FormatUint(id, 10),
		query: [][2]string{
			{"color", colors[id%uint64(len(colors))]},
			{"ref", "r" + strconv.FormatUint(id%97, 10)},
		},
	}
}

// canonicalURL is the normalized form every spelling of id maps to.
func canonicalURL(id uint64) string {
	p := urlOf(id)
	var b strings.Builder
	b.WriteString(p.scheme + "://" + p.host + p.path + "?")
	for i, kv := range p.query {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(kv[0] + "=" + kv[1])
	}
	return b.String()
}

// spellURL writes id's URL with a random subset of the variations a crawler
// meets: upper-case scheme and host letters, the default port, a fragment,
// another query order, dot segments, percent-encoded unreserved characters,
// an empty query parameter.
func spellURL(id uint64, r *rand.Rand) string {
	p := urlOf(id)
	var b strings.Builder
	scheme, host := p.scheme, p.host
	if r.IntN(3) == 0 {
		scheme = strings.ToUpper(scheme)
	}
	if r.IntN(3) == 0 {
		host = mixCase(host, r)
	}
	b.WriteString(scheme + "://" + host)
	if r.IntN(4) == 0 {
		if p.scheme == "http" {
			b.WriteString(":80")
		} else {
			b.WriteString(":443")
		}
	}
	path := p.path
	switch r.IntN(5) {
	case 0:
		i := strings.LastIndexByte(path, '/')
		path = path[:i] + "/." + path[i:]
	case 1:
		i := strings.LastIndexByte(path, '/')
		path = path[:i] + "/tmp/.." + path[i:]
	case 2:
		path = "/%" + fmt.Sprintf("%02x", path[1]) + path[2:] // e.g. %70roducts
	}
	b.WriteString(path)
	q := make([]string, 0, 3)
	for _, kv := range p.query {
		q = append(q, kv[0]+"="+kv[1])
	}
	if r.IntN(2) == 0 {
		q[0], q[1] = q[1], q[0]
	}
	if r.IntN(6) == 0 {
		q = append(q, "")
	}
	b.WriteString("?" + strings.Join(q, "&"))
	if r.IntN(4) == 0 {
		b.WriteString("#section-" + strconv.Itoa(r.IntN(10)))
	}
	return b.String()
}

func mixCase(s string, r *rand.Rand) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' && r.IntN(2) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// urlValue is the JSON crawler event for a spelled URL.
func urlValue(spelled string, id uint64, ts time.Time) []byte {
	b := make([]byte, 0, len(spelled)+96)
	b = append(b, `{"url":`...)
	b = strconv.AppendQuote(b, spelled)
	b = append(b, `,"depth":`...)
	b = strconv.AppendUint(b, id%7, 10)
	b = append(b, `,"discovered_at":"`...)
	b = ts.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
	b = append(b, `","source":"synthetic-crawler"}`...)
	return b
}
