package keys

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// legacyNormalizeURL is NormalizeURL as it was on net/url.Parse, before the
// lenient parser. Keys live in filters for the whole window, so a URL that
// was accepted before must keep its canonical form; FuzzLegacyNormalizeURL
// holds the new parser to that, except for the classes legacyDiffers lists.
func legacyNormalizeURL(dst []byte, raw string) ([]byte, error) {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return dst, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	if u.Scheme == "" || u.Opaque != "" || u.Host == "" {
		return dst, ErrBadURL
	}
	host, err := legacyCanonicalHost(u.Hostname())
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
		dst = appendQuery(dst, u.RawQuery, nil)
	}
	return dst, nil
}

func legacyCanonicalHost(h string) (string, error) {
	if strings.Contains(h, ":") {
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

// FuzzLegacyNormalizeURL: whatever the net/url based canonicalizer
// accepted, NormalizeURL accepts too, with the same canonical form.
func FuzzLegacyNormalizeURL(f *testing.F) {
	for _, s := range []string{
		"http://example.com", "HTTP://Example.COM:80/a/./b/../c?b=2&a=1#f",
		"https://u:p@[::1]:443/%7e?x=%zz", "http://B\u00fccher.example/caf\u00e9",
		"http://a.com/..//x/?&&=&a", "http://a.com/%2e%2E/%2F?q=+%2b",
		"ws://a.b.c.:0080/?", "http://a.com/;p?q=1;2", "http://a@b@c/x",
		"http://a.com/a%2F b", "http://@a.com/", "http://a.com/a\\b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		old, err := legacyNormalizeURL(nil, in)
		if err != nil {
			return
		}
		got, err := NormalizeURL(nil, in)
		if err != nil && !legacyDiffers(in) {
			t.Fatalf("NormalizeURL(%q) rejects what net/url accepted as %q: %v", in, old, err)
		}
		if string(got) != string(old) && !legacyDiffers(in) {
			t.Fatalf("NormalizeURL(%q) = %q, was %q", in, got, old)
		}
	})
}

// legacyDiffers reports whether in belongs to a class whose canonical form
// changed on purpose; docs/keys.md lists them for operators.
func legacyDiffers(in string) bool {
	u, err := url.Parse(strings.TrimSpace(in))
	if err != nil {
		return false
	}
	if strings.Contains(u.Hostname(), ":") && !strings.HasPrefix(u.Host, "[") {
		// An IPv6 address without brackets ("a://:::" read as [::] with
		// an empty port) is not a host; it is rejected.
		return true
	}
	p, err := splitURL(trimURL(in))
	if err != nil {
		return false
	}
	if h, err := url.PathUnescape(p.host); err == nil && !utf8.ValidString(h) {
		// A host that is not UTF-8 once decoded is rejected, as browsers
		// do; idna turned every invalid byte into U+FFFD, so http://%FE/
		// and http://%FF/ were one key.
		return true
	}
	switch {
	case p.special && strings.Contains(p.path, "\\"):
		// A backslash in the path is a '/' to a browser; it was escaped
		// as %5C.
		return true
	case u.User != nil && u.User.Username() == "":
		// "http://@host/" and "http://:@host/" lose the empty userinfo.
		_, set := u.User.Password()
		pw, _ := u.User.Password()
		return !set || pw == ""
	case u.User != nil:
		// "http://user:@host/" loses the empty password.
		pw, set := u.User.Password()
		if set && pw == "" {
			return true
		}
	}
	// net/url decodes the path and, if the escaped text is not valid as
	// written (a space, a quote…), escapes the decoded path again, which
	// turns an escaped reserved character into the character itself:
	// /a%2F b was /a/%20b. The escape is now kept as documented.
	was := appendPercentNormalized(nil, u.EscapedPath(), isPathChar)
	now := appendPercentNormalized(nil, p.path, isPathChar)
	return string(was) != string(now)
}
