package keys

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// urlParts are the components of an absolute URL as written, split the way
// a browser splits them: the basic URL parser of the WHATWG URL standard
// (https://url.spec.whatwg.org/#concept-basic-url-parser) without a base
// URL. Splitting never decodes or validates beyond what locating the
// components needs; NormalizeURL does the rest.
type urlParts struct {
	scheme   string // ASCII letter, then letters, digits, '+', '-', '.'; as written
	special  bool   // http, https, ws, wss, ftp: '\' is a '/', slashes after the scheme are optional
	userinfo string // before the last '@' of the authority; "" if none
	host     string // percent-escapes as written; an IPv6 literal keeps its brackets
	port     string // digits, or "" for none or an empty port
	path     string // up to '?' or '#'; "" or starting with '/' (or '\' if special)
	query    string // between '?' and '#', without the '?'
}

// trimURL removes what a browser removes before parsing: leading and
// trailing C0 control characters and spaces, then every tab, line feed and
// carriage return inside. Leading and trailing Unicode white space goes
// too, as it always has here. It allocates only if a tab or newline is
// inside the URL.
func trimURL(s string) string {
	if len(s) > 0 && (isTrimmed(s[0]) || isTrimmed(s[len(s)-1])) {
		s = strings.TrimFunc(s, func(r rune) bool { return r <= ' ' || unicode.IsSpace(r) })
	}
	if strings.ContainsAny(s, "\t\n\r") {
		// Byte by byte: strings.Map would turn invalid UTF-8 into U+FFFD.
		b := make([]byte, 0, len(s))
		for i := 0; i < len(s); i++ {
			if c := s[i]; c != '\t' && c != '\n' && c != '\r' {
				b = append(b, c)
			}
		}
		s = string(b)
	}
	return s
}

// isTrimmed reports whether a URL starting or ending with byte c may need
// trimming: C0 controls, space, and the lead bytes of non-ASCII white space.
func isTrimmed(c byte) bool {
	return c <= ' ' || c >= utf8.RuneSelf
}

func isSpecialScheme(s string) bool {
	switch len(s) {
	case 2:
		return strings.EqualFold(s, "ws")
	case 3:
		return strings.EqualFold(s, "wss") || strings.EqualFold(s, "ftp")
	case 4:
		return strings.EqualFold(s, "http")
	case 5:
		return strings.EqualFold(s, "https")
	}
	return false
}

// splitURL splits the trimmed absolute URL s into its components. It fails
// where a browser fails on an absolute URL (no scheme, an empty host, a
// port that is not a number, an unclosed IPv6 bracket) and, unlike a
// browser, on a non-special scheme without "//": such a URL has no host to
// key by.
func splitURL(s string) (urlParts, error) {
	var p urlParts
	i := 0
	for i < len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' ||
			i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.') {
			i++
			continue
		}
		break
	}
	if i == 0 || i == len(s) || s[i] != ':' {
		return p, fmt.Errorf("%w: no scheme", ErrBadURL)
	}
	p.scheme, s = s[:i], s[i+1:]
	p.special = isSpecialScheme(p.scheme)

	if p.special {
		// "special authority ignore slashes state": http:example.com,
		// http:/example.com and http:\\example.com all have the host
		// example.com.
		for len(s) > 0 && (s[0] == '/' || s[0] == '\\') {
			s = s[1:]
		}
	} else {
		if !strings.HasPrefix(s, "//") {
			return p, fmt.Errorf("%w: no host", ErrBadURL)
		}
		s = s[2:]
	}

	end := 0
	for end < len(s) {
		c := s[end]
		if c == '/' || c == '?' || c == '#' || c == '\\' && p.special {
			break
		}
		end++
	}
	auth, rest := s[:end], s[end:]
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		p.userinfo, auth = auth[:at], auth[at+1:]
	}
	if strings.HasPrefix(auth, "[") {
		j := strings.IndexByte(auth, ']')
		if j < 0 {
			return p, fmt.Errorf("%w: unclosed IPv6 literal", ErrBadURL)
		}
		p.host, auth = auth[:j+1], auth[j+1:]
		if auth != "" {
			if auth[0] != ':' {
				return p, fmt.Errorf("%w: text after IPv6 literal", ErrBadURL)
			}
			p.port = auth[1:]
		}
	} else if j := strings.IndexByte(auth, ':'); j >= 0 {
		p.host, p.port = auth[:j], auth[j+1:]
	} else {
		p.host = auth
	}
	if p.host == "" {
		return p, fmt.Errorf("%w: empty host", ErrBadURL)
	}
	for k := 0; k < len(p.port); k++ {
		if c := p.port[k]; c < '0' || c > '9' {
			return p, fmt.Errorf("%w: port %q", ErrBadURL, p.port)
		}
	}

	if k := strings.IndexByte(rest, '#'); k >= 0 {
		rest = rest[:k]
	}
	if k := strings.IndexByte(rest, '?'); k >= 0 {
		rest, p.query = rest[:k], rest[k+1:]
	}
	p.path = rest
	return p, nil
}
