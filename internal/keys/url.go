package keys

import (
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
// dst[at:] in place (RFC 3986 section 5.2.4).
func removeDotSegments(dst []byte, at int) []byte {
	p := string(dst[at:])
	if !strings.Contains(p, ".") {
		return dst
	}
	segs := strings.Split(p, "/")
	if segs[0] != "" {
		// A relative path cannot occur with an authority; keep it as is.
		return dst
	}
	out := make([]string, 0, len(segs))
	for i, s := range segs[1:] {
		last := i == len(segs)-2
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	dst = dst[:at]
	for _, s := range out {
		dst = append(dst, '/')
		dst = append(dst, s...)
	}
	return dst
}

// appendQuery appends "?" and the normalized, sorted, non-empty parameters
// of the raw query, or nothing if none remain.
func appendQuery(dst []byte, rawQuery string) []byte {
	var params []string
	for p := range strings.SplitSeq(rawQuery, "&") {
		if p == "" {
			continue
		}
		params = append(params, string(appendPercentNormalized(nil, p, isQueryChar)))
	}
	if len(params) == 0 {
		return dst
	}
	slices.SortStableFunc(params, func(a, b string) int {
		return strings.Compare(paramName(a), paramName(b))
	})
	dst = append(dst, '?')
	for i, p := range params {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, p...)
	}
	return dst
}

func paramName(p string) string {
	if i := strings.IndexByte(p, '='); i >= 0 {
		return p[:i]
	}
	return p
}
