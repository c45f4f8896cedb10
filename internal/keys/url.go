package keys

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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
// that URLs a crawler should treat as one page compare equal.
//
// The URL is parsed leniently, the way a browser parses a link (the WHATWG
// URL standard, https://url.spec.whatwg.org/): what a browser would still
// request is normalized, not rejected.
//
//   - leading and trailing white space and C0 control characters are
//     removed, and so is every tab, line feed and carriage return inside
//     the URL;
//   - for the schemes http, https, ws, wss and ftp a '\' counts as '/', and
//     any number of slashes, or none, may follow "scheme:";
//   - scheme and host are lower-cased; percent-escapes in the host are
//     decoded (example%2Ecom is example.com), an internationalized host is
//     converted to its ASCII (punycode) form, trailing dots of the host are
//     removed, IPv6 literals take their canonical form; a host left with a
//     character other than letters, digits, '-', '.', '_' and '~' (or
//     that is not UTF-8 once decoded) is rejected;
//   - the default port of the scheme (http 80, https 443, ws 80, wss 443,
//     ftp 21) and an empty port are dropped, leading zeros of a port removed;
//   - an empty user name and password are dropped, as is an empty password;
//   - the fragment is dropped;
//   - percent-encoding is normalized: escapes of unreserved characters
//     (A-Z a-z 0-9 - . _ ~) are decoded, other escapes use upper-case hex,
//     characters that must be escaped are escaped (control characters,
//     space, non-ASCII bytes as their UTF-8), a stray '%' becomes %25;
//   - dot segments of the path are resolved (RFC 3986 5.2.4), an empty path
//     becomes "/";
//   - empty query parameters (nothing between two '&', or between '?'
//     and '&') are dropped, the rest are sorted by name with a stable
//     sort (the order of repeated names is kept), and an empty query
//     loses its '?'. A parameter with an empty value (x=, x) or an empty
//     name (=1) is not empty and is kept.
//
// Escaped reserved characters (%2F, %26, %3D…) stay escaped: decoding them
// would change the meaning of the URL. '+' in a query is kept as is.
// Userinfo is kept, decoded and escaped again. IPv4 addresses in other
// notations than dotted decimal (http://3279880203/, http://0x7f.1/) are
// not rewritten. The result is a fixed point: normalizing it again returns
// it unchanged. NormalizeURLRules adds opt-in rules that merge more
// (tracking and session parameters, www, …).
//
// NormalizeURL is its own parser rather than net/url, which rejects much
// of what browsers and crawlers accept (a raw control character, a stray
// '%' in the path, an escaped host); github.com/PuerkitoBio/purell, the
// usual normalization library, is archived and unmaintained. Cost: one
// pass over the URL; no allocation when dst has room, except for an
// internationalized host, a tab or newline inside the URL, or a query
// that is not yet sorted.
func NormalizeURL(dst []byte, raw string) ([]byte, error) {
	return normalizeURL(dst, raw, nil)
}

// normalizeURL is NormalizeURL with the opt-in rules r on top (nil: none).
// It is the one implementation of both, so that the rules only ever
// remove from the safe canonical form and the repartition hop and the
// dedup stage, which both reach it through Extractor, agree.
func normalizeURL(dst []byte, raw string, r *URLRules) ([]byte, error) {
	p, err := splitURL(trimURL(raw))
	if err != nil {
		return dst, err
	}
	out := dst
	schemeAt := len(out)
	for i := 0; i < len(p.scheme); i++ {
		out = append(out, lowerASCII(p.scheme[i]))
	}
	scheme := out[schemeAt:]
	var portBuf [5]byte
	var port []byte
	if p.port != "" {
		n, err := strconv.ParseUint(p.port, 10, 16)
		if err != nil {
			return dst, fmt.Errorf("%w: port %q", ErrBadURL, p.port)
		}
		port = strconv.AppendUint(portBuf[:0], n, 10)
		if defaultPorts[string(scheme)] == string(port) {
			port = nil
		}
	}
	web := string(scheme) == "http" || string(scheme) == "https"
	if web && r.has(RuleFoldScheme) && len(scheme) == 5 && port == nil {
		out = out[:schemeAt+4] // https → http
	}
	out = append(out, "://"...)

	if p.userinfo != "" && !r.has(RuleStripUserinfo) {
		user, pass, _ := strings.Cut(p.userinfo, ":")
		if user != "" || pass != "" {
			out = appendUserinfo(out, user)
			if pass != "" {
				out = append(out, ':')
				out = appendUserinfo(out, pass)
			}
			out = append(out, '@')
		}
	}
	hostAt := len(out)
	if out, err = appendHost(out, p.host); err != nil {
		return dst, err
	}
	www := 0
	if web && r.has(RuleStripWWW) {
		www = wwwPrefix(out[hostAt:])
	}
	if port != nil {
		out = append(out, ':')
		out = append(out, port...)
	}

	pathAt := len(out)
	if p.special {
		path := p.path
		for {
			i := strings.IndexByte(path, '\\')
			if i < 0 {
				break
			}
			out = appendPercentNormalized(out, path[:i], isPathChar)
			out = append(out, '/')
			path = path[i+1:]
		}
		out = appendPercentNormalized(out, path, isPathChar)
	} else {
		out = appendPercentNormalized(out, p.path, isPathChar)
	}
	if r.has(RuleStripSessionIDs) {
		out = removeSessionPathParams(out, pathAt)
	}
	out = removeDotSegments(out, pathAt)
	if len(out) == pathAt {
		out = append(out, '/')
	}
	if web && r != nil {
		out = r.rewritePath(out, pathAt)
	}

	if p.query != "" {
		out = appendQuery(out, p.query, r)
	}
	if www > 0 && (len(out) > pathAt+1 || out[pathAt] != '/') {
		// Heritrix's StripWWWNRule keeps the www of a site's top page
		// ("slash page"): a site reachable under one of the two names
		// only is then still crawled.
		out = append(out[:hostAt], out[hostAt+www:]...)
	}
	return out, nil
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// appendHost appends the canonical form of the host as written: an IPv6
// literal in brackets, or a domain name (or IPv4 address) with its escapes
// decoded, lower-cased, in punycode if it is internationalized, without
// trailing dots.
func appendHost(dst []byte, h string) ([]byte, error) {
	if h[0] == '[' { // splitURL saw the closing ']'
		a, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || a.Zone() != "" || !a.Is6() {
			return dst, fmt.Errorf("%w: host %q", ErrBadURL, h)
		}
		dst = append(dst, '[')
		dst = a.AppendTo(dst)
		return append(dst, ']'), nil
	}
	at := len(dst)
	ascii := true
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c == '%' && i+2 < len(h) && isHex(h[i+1]) && isHex(h[i+2]) {
			c = unhex(h[i+1])<<4 | unhex(h[i+2])
			i += 2
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
		dst = append(dst, lowerASCII(c))
	}
	if !ascii {
		name := string(dst[at:])
		if !utf8.ValidString(name) {
			return dst[:at], fmt.Errorf("%w: host %q is not UTF-8", ErrBadURL, h)
		}
		a, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return dst[:at], fmt.Errorf("%w: host %q: %w", ErrBadURL, h, err)
		}
		dst = dst[:at]
		for i := 0; i < len(a); i++ {
			dst = append(dst, lowerASCII(a[i]))
		}
	}
	for len(dst) > at && dst[len(dst)-1] == '.' {
		dst = dst[:len(dst)-1]
	}
	if len(dst) == at {
		return dst, fmt.Errorf("%w: empty host", ErrBadURL)
	}
	for _, c := range dst[at:] {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return dst[:at], fmt.Errorf("%w: host %q has character %q", ErrBadURL, h, c)
		}
	}
	return dst, nil
}

// appendUserinfo appends a user name or password decoded and escaped again
// as net/url escapes userinfo, which is how userinfo has always been
// written here: letters, digits, - . _ ~ $ & + , ; = stay, the rest is
// escaped.
func appendUserinfo(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
		}
		switch {
		case isUnreserved(c), c == '$', c == '&', c == '+', c == ',', c == ';', c == '=':
			dst = append(dst, c)
		default:
			dst = append(dst, '%', upperHex[c>>4], upperHex[c&15])
		}
	}
	return dst
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
// raw query that the rules r keep (nil: all), stably sorted by name, or
// nothing if none remain.
func appendQuery(dst []byte, rawQuery string, r *URLRules) []byte {
	q := len(dst)
	dst = append(dst, '?')
	var stack [16][2]int
	params := stack[:0] // [start, end) of each parameter in dst
	var cf coldFusion
	for p := range strings.SplitSeq(rawQuery, "&") {
		if p == "" {
			continue
		}
		sep := len(dst)
		if len(params) > 0 {
			dst = append(dst, '&')
		}
		s := len(dst)
		dst = appendPercentNormalized(dst, p, isQueryChar)
		if r != nil && r.dropParam(dst[s:], &cf) {
			dst = dst[:sep]
			continue
		}
		params = append(params, [2]int{s, len(dst)})
	}
	if cf.pair() {
		dst, params = removeParams(dst, q+1, params)
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
