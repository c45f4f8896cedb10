package keys

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// ErrBadURL is returned (wrapped) by NormalizeURL for input that is not an
// absolute URL with a host.
var ErrBadURL = errors.New("not an absolute URL with a host")

// defaultPorts are dropped from the canonical form.
var defaultPorts = map[string]string{
	"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21",
}

// NormalizeURL appends the canonical form of the absolute URL raw to dst, so
// that URLs a crawler should treat as one page compare equal:
//
//   - surrounding white space is removed;
//   - scheme and host are lower-cased, an internationalized host is
//     converted to its ASCII (punycode) form, trailing dots of the host are
//     removed, IPv6 literals take their canonical form;
//   - the default port of the scheme (http 80, https 443, ws 80, wss 443,
//     ftp 21) and an empty port are dropped, leading zeros of a port removed;
//   - the fragment is dropped;
//   - percent-encoding is normalized: escapes of unreserved characters
//     (A-Z a-z 0-9 - . _ ~) are decoded, other escapes use upper-case hex,
//     characters that must be escaped are escaped, a stray '%' becomes %25;
//   - dot segments of the path are resolved (RFC 3986 5.2.4), an empty path
//     becomes "/";
//   - empty query parameters are dropped, the rest are sorted by name with
//     a stable sort (the order of repeated names is kept), and an empty
//     query loses its '?'.
//
// Escaped reserved characters (%2F, %26, %3D…) stay escaped: decoding them
// would change the meaning of the URL. '+' in a query is kept as is.
// Userinfo is kept. The result is a fixed point: normalizing it again
// returns it unchanged.
//
// NormalizeURL builds on net/url (github.com/PuerkitoBio/purell, the usual
// library for this, is archived and unmaintained).
func NormalizeURL(dst []byte, raw string) ([]byte, error) {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return dst, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	if u.Scheme == "" || u.Opaque != "" || u.Host == "" {
		return dst, ErrBadURL
	}
	host, err := canonicalHost(u.Hostname())
	if err != nil {
		return dst, err
	}
	port := u.Port()
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return dst, fmt.Errorf("%w: port %q", ErrBadURL, port)
		}
		port = strconv.FormatUint(n, 10)
		if defaultPorts[u.Scheme] == port {
			port = ""
		}
	}

	dst = append(dst, u.Scheme...)
	dst = append(dst, "://"...)
	if u.User != nil {
		dst = append(dst, u.User.String()...)
		dst = append(dst, '@')
	}
	dst = append(dst, host...)
	if port != "" {
		dst = append(dst, ':')
		dst = append(dst, port...)
	}

	pathAt := len(dst)
	dst = appendPercentNormalized(dst, u.EscapedPath(), isPathChar)
	dst = removeDotSegments(dst, pathAt)
	if len(dst) == pathAt {
		dst = append(dst, '/')
	}

	if u.RawQuery != "" {
		dst = appendQuery(dst, u.RawQuery)
	}
	return dst, nil
}

func canonicalHost(h string) (string, error) {
	if strings.Contains(h, ":") { // IPv6 literal
		a, err := netip.ParseAddr(h)
		if err != nil || a.Zone() != "" || !a.Is6() {
			return "", fmt.Errorf("%w: host %q", ErrBadURL, h)
		}
		return "[" + a.String() + "]", nil
	}
	ascii := true
	for i := 0; i < len(h); i++ {
		if h[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if !ascii {
		a, err := idna.Lookup.ToASCII(h)
		if err != nil {
			return "", fmt.Errorf("%w: host %q: %w", ErrBadURL, h, err)
		}
		h = a
	}
	h = strings.TrimRight(strings.ToLower(h), ".")
	if h == "" {
		return "", fmt.Errorf("%w: empty host", ErrBadURL)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return "", fmt.Errorf("%w: host %q has character %q", ErrBadURL, h, c)
		}
	}
	return h, nil
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func isSubDelim(c byte) bool {
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=':
		return true
	}
	return false
}

// isPathChar: pchar / "/" of RFC 3986.
func isPathChar(c byte) bool {
	return isUnreserved(c) || isSubDelim(c) || c == ':' || c == '@' || c == '/'
}

// isQueryChar: pchar / "/" / "?", less the parameter separator '&'.
func isQueryChar(c byte) bool {
	return c != '&' && (isPathChar(c) || c == '?')
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

const upperHex = "0123456789ABCDEF"

// appendPercentNormalized appends s with escapes of unreserved characters
// decoded, other escapes in upper-case hex, and every byte outside allowed
// escaped.
func appendPercentNormalized(dst []byte, s string, allowed func(byte) bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			v := unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
			if isUnreserved(v) {
				dst = append(dst, v)
			} else {
				dst = append(dst, '%', upperHex[v>>4], upperHex[v&15])
			}
			continue
		}
		if c != '%' && allowed(c) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', upperHex[c>>4], upperHex[c&15])
	}
	return dst
}

// removeDotSegments resolves "." and ".." segments of the path in
// dst[at:] in place (RFC 3986 section 5.2.4). The output is never longer
// than the input, so it is written over the input left to right.
func removeDotSegments(dst []byte, at int) []byte {
	p := dst[at:]
	if len(p) == 0 || p[0] != '/' || !hasDotSegment(p) {
		// A relative path cannot occur with an authority; keep it as is.
		return dst
	}
	w, n := 0, len(p)
	for r := 0; r < n; {
		e := r + 1
		for e < n && p[e] != '/' {
			e++
		}
		seg, last := p[r+1:e], e == n
		switch {
		case len(seg) == 1 && seg[0] == '.':
			if last {
				p[w] = '/'
				w++
			}
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			for w > 0 { // drop the last output segment, "/name"
				w--
				if p[w] == '/' {
					break
				}
			}
			if last {
				p[w] = '/'
				w++
			}
		default:
			w += copy(p[w:], p[r:e])
		}
		r = e
	}
	return dst[:at+w]
}

func hasDotSegment(p []byte) bool {
	n := len(p)
	for i := 0; i+1 < n; i++ {
		if p[i] != '/' || p[i+1] != '.' {
			continue
		}
		if i+2 == n || p[i+2] == '/' {
			return true
		}
		if p[i+2] == '.' && (i+3 == n || p[i+3] == '/') {
			return true
		}
	}
	return false
}

// appendQuery appends "?" and the normalized, non-empty parameters of the
// raw query, stably sorted by name, or nothing if none remain.
func appendQuery(dst []byte, rawQuery string) []byte {
	q := len(dst)
	dst = append(dst, '?')
	var stack [16][2]int
	params := stack[:0] // [start, end) of each parameter in dst
	for p := range strings.SplitSeq(rawQuery, "&") {
		if p == "" {
			continue
		}
		if len(params) > 0 {
			dst = append(dst, '&')
		}
		s := len(dst)
		dst = appendPercentNormalized(dst, p, isQueryChar)
		params = append(params, [2]int{s, len(dst)})
	}
	if len(params) == 0 {
		return dst[:q]
	}
	name := func(r [2]int) []byte {
		b := dst[r[0]:r[1]]
		if i := bytes.IndexByte(b, '='); i >= 0 {
			return b[:i]
		}
		return b
	}
	cmp := func(a, b [2]int) int { return bytes.Compare(name(a), name(b)) }
	if slices.IsSortedFunc(params, cmp) {
		return dst
	}
	slices.SortStableFunc(params, cmp)
	scratch := slices.Clone(dst[q+1:])
	base := q + 1
	dst = dst[:base]
	for i, r := range params {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, scratch[r[0]-base:r[1]-base]...)
	}
	return dst
}
