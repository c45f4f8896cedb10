package keys

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizeURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://example.com", "http://example.com/"},
		{"HTTP://Example.COM/Path", "http://example.com/Path"},
		{"  https://example.com/a  ", "https://example.com/a"},
		{"http://example.com:80/", "http://example.com/"},
		{"https://example.com:443/", "https://example.com/"},
		{"http://example.com:8080/", "http://example.com:8080/"},
		{"https://example.com:80/", "https://example.com:80/"},
		{"http://example.com:0080/", "http://example.com/"},
		{"http://example.com:/", "http://example.com/"},
		{"http://example.com./x", "http://example.com/x"},
		{"http://example.com/a#frag", "http://example.com/a"},
		{"http://example.com/#", "http://example.com/"},
		{"http://example.com/a/./b/../c", "http://example.com/a/c"},
		{"http://example.com/a/b/..", "http://example.com/a/"},
		{"http://example.com/../../a", "http://example.com/a"},
		{"http://example.com/a/%2E%2e/b", "http://example.com/b"},
		{"http://example.com/a//b", "http://example.com/a//b"},
		{"http://example.com/%7Euser/%41%62", "http://example.com/~user/Ab"},
		{"http://example.com/a%2fb", "http://example.com/a%2Fb"},
		{"http://example.com/a b", "http://example.com/a%20b"},
		{"http://example.com/caf\u00e9", "http://example.com/caf%C3%A9"},
		{"http://example.com/caf%c3%a9", "http://example.com/caf%C3%A9"},
		{"http://example.com/?", "http://example.com/"},
		{"http://example.com/?b=2&a=1&c", "http://example.com/?a=1&b=2&c"},
		{"http://example.com/?a=2&b=1&a=1", "http://example.com/?a=2&a=1&b=1"},
		{"http://example.com/?a=1&&b=2&", "http://example.com/?a=1&b=2"},
		{"http://example.com/?q=%7e%2f+x", "http://example.com/?q=~%2F+x"},
		{"http://example.com/?q=100%", "http://example.com/?q=100%25"},
		{"http://example.com/?q=a b", "http://example.com/?q=a%20b"},
		{"http://user:pw@example.com/", "http://user:pw@example.com/"},
		{"http://[2001:DB8::0001]:80/", "http://[2001:db8::1]/"},
		{"http://B\u00fccher.example/", "http://xn--bcher-kva.example/"},
		{"http://127.0.0.1:8080/x", "http://127.0.0.1:8080/x"},
		{"ftp://example.com:21/f", "ftp://example.com/f"},

		// Parsed leniently, as a browser would (issue classes first).
		{"http://foo.com/\x01!", "http://foo.com/%01!"},
		{"http://foo.com/\x00x", "http://foo.com/%00x"},
		{"http://foo.com/\x1a!", "http://foo.com/%1A!"},
		{"http://foo.com/a\x7f", "http://foo.com/a%7F"},
		{"http://foo.com/?q=\x01\x00x", "http://foo.com/?q=%01%00x"},
		{"http://foo.com/?q=x\x01", "http://foo.com/?q=x"}, // trailing control characters are trimmed
		{"http://www.example.com/p%zz%77%v", "http://www.example.com/p%25zzw%25v"},
		{"http://example.com/100%", "http://example.com/100%25"},
		{"http://example.com/%2", "http://example.com/%252"},
		{"http://example.com/%%41", "http://example.com/%25A"},
		{"https://example%2Ecom/", "https://example.com/"},
		{"http://%65xample.COM%2e/", "http://example.com/"},
		{"http://b%C3%BCcher.example/", "http://xn--bcher-kva.example/"},
		{"http://example.com/a%2F b", "http://example.com/a%2F%20b"},
		{"http://exa\tmple.com/a\nb\rc", "http://example.com/abc"},
		{"http://example.com/\xff\tx", "http://example.com/%FFx"}, // not UTF-8: bytes kept, not U+FFFD
		{"\x00 http://example.com/ \x1f", "http://example.com/"},
		{"http://example.com/x\u00a0", "http://example.com/x"},
		{"http:\\\\example.com\\a\\..\\b", "http://example.com/b"},
		{"http://example.com/a\\b?c\\d", "http://example.com/a/b?c%5Cd"},
		{"http:example.com/a", "http://example.com/a"},
		{"https:///example.com/", "https://example.com/"},
		{"foo://example.com/a\\b", "foo://example.com/a%5Cb"},
		{"http://example.com/a#%zz", "http://example.com/a"},
		{"http://@example.com/", "http://example.com/"},
		{"http://:@example.com/", "http://example.com/"},
		{"http://user:@example.com/", "http://user@example.com/"},
		{"http://:pw@example.com/", "http://:pw@example.com/"},
		{"http://a b:%zz@example.com/", "http://a%20b:%25zz@example.com/"},
		{"http://a@b@example.com/", "http://a%40b@example.com/"},
		{"http://example.com:00000000000000443/", "http://example.com:443/"},
	}
	for _, tt := range tests {
		got, err := NormalizeURL(nil, tt.in)
		if err != nil {
			t.Errorf("NormalizeURL(%q): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("NormalizeURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		again, err := NormalizeURL(nil, string(got))
		if err != nil || string(again) != string(got) {
			t.Errorf("not idempotent: %q -> %q -> %q (%v)", tt.in, got, again, err)
		}
	}
}

func TestNormalizeURLVariantsAgree(t *testing.T) {
	variants := []string{
		"https://shop.example.com/products/42?color=red&size=m",
		"HTTPS://Shop.Example.COM:443/products/42?size=m&color=red",
		"https://shop.example.com/products/./42?color=red&size=m#reviews",
		"https://shop.example.com/products/x/../42?color=red&&size=m",
		"https://shop.example.com/%70roducts/42?color=r%65d&size=m",
		"https://shop.example%2Ecom/products/42?color=red&size=m",
		"\thttps://shop.exam\nple.com/products\\42?color=red&size=m\n",
		"https:shop.example.com/products/42?color=red&size=m#\x00",
	}
	want, err := NormalizeURL(nil, variants[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants[1:] {
		got, err := NormalizeURL(nil, v)
		if err != nil || string(got) != string(want) {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
}

func TestNormalizeURLRejects(t *testing.T) {
	for _, in := range []string{
		"", "not a url", "/relative/path", "example.com/x", "mailto:a@example.com",
		"http://", "http://exa mple.com/", "http://example.com:99999/", "http://[fe80::1%25en0]/",
		"http://ex\x00ample.com/", "http://%zz/",
		"http://ex%00ample.com/", "http://example%20com/", "http://a%2Fb/", "http://a%3A80/",
		"http://%25/", "http://%ff.com/", "http://%C3%28.com/", "http://[::1/", "http://[::1]x/",
		"http://a.com:8o/", "http://a.com:80:90/", "http:///", "http:?q", "http://user@/x",
		"foo:bar", "foo:/bar", "http://ex%ample.com/", "http://.../",
	} {
		out, err := NormalizeURL([]byte("keep"), in)
		if !errors.Is(err, ErrBadURL) {
			t.Errorf("NormalizeURL(%q) = %q, %v; want ErrBadURL", in, out, err)
		}
		if string(out) != "keep" {
			t.Errorf("NormalizeURL(%q) changed dst on error: %q", in, out)
		}
	}
}

// referenceRemoveDotSegments is the RFC 3986 5.2.4 algorithm on split
// segments, the straightforward form of the in-place version.
func referenceRemoveDotSegments(p string) string {
	segs := strings.Split(p, "/")
	var out []string
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
	var b strings.Builder
	for _, s := range out {
		b.WriteString("/" + s)
	}
	return b.String()
}

func FuzzRemoveDotSegments(f *testing.F) {
	for _, s := range []string{"/a/./b/../c", "/..", "/.", "/a/..//x", "/a/b/..", "/./../a/.", "/a.b/..c/.d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !strings.HasPrefix(p, "/") {
			return
		}
		got := string(removeDotSegments([]byte("h:"+p), 2))[2:]
		if want := referenceRemoveDotSegments(p); got != want {
			t.Fatalf("removeDotSegments(%q) = %q, want %q", p, got, want)
		}
	})
}
