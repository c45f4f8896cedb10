package keys

import (
	"strings"
	"testing"
)

// The vectors of the URL rules, each tagged with its source: the positive
// and negative cases of the crawlers' own tests (Heritrix's canonicalize
// rule tests, crawler-commons' BasicURLNormalizer tests, w3lib's
// canonicalize_url and url_query_cleaner tests, Nutch's regex-normalize,
// slash and protocol normalizer tests), read from their sources (the
// commits are named in docs/urls.md).

const (
	heritrixBase  = "http://www.archive.org/index.html" // StripSessionIDsTest's BASE
	heritrixStr32 = "0123456789abcdefghijklemopqrstuv"
)

// ruleVector is a pair the rules named make one key.
type ruleVector struct {
	source string // anchor and test
	rules  string // --url-rules ("": the safe form alone)
	params string // --url-strip-params
	a, b   string
}

var ruleVectors = []ruleVector{
	// Heritrix 3, modules/src/test/java/org/archive/modules/canonicalize.
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?jsessionid=" + heritrixStr32, heritrixBase + "?"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?jsessionid=" + heritrixStr32 + "&x=y", heritrixBase + "?x=y"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?one=two&jsessionid=" + heritrixStr32 + "&x=y", heritrixBase + "?one=two&x=y"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?one=two&jsessionid=" + heritrixStr32, heritrixBase + "?one=two&"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?aspsessionidABCDEFGH=ABCDEFGHIJKLMNOPQRSTUVWX&x=y", heritrixBase + "?x=y"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?phpsessid=" + heritrixStr32 + "&x=y", heritrixBase + "?x=y"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?one=two&phpsessid=" + heritrixStr32 + "&x=y", heritrixBase + "?one=two&x=y"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?one=two&phpsessid=" + heritrixStr32, heritrixBase + "?one=two&"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?sid=9682993c8daa2c5497996114facdc805&x=y", heritrixBase + "?x=y"},
	{"heritrix StripSessionIDsTest", "strip-session-ids", "", heritrixBase + "?sid=9682993c8daa2c5497996114facdc805&jsessionid=" + heritrixStr32, heritrixBase + "?"},
	{"heritrix StripSessionCFIDsTest", "strip-session-ids", "", "http://a.b.c/boo?CFID=1169580&CFTOKEN=48630702&dtstamp=22%2F08%2F2006%7C06%3A58%3A11", "http://a.b.c/boo?dtstamp=22%2F08%2F2006%7C06%3A58%3A11"},
	{"heritrix StripSessionCFIDsTest", "strip-session-ids", "", "http://a.b.c/boo?CFID=12412453&CFTOKEN=15501799   &dt=19_08_2006_22_39_28", "http://a.b.c/boo?dt=19_08_2006_22_39_28"},
	{"heritrix StripSessionCFIDsTest", "strip-session-ids", "", "http://a.b.c/boo?CFID=14475712   &CFTOKEN=2D89F5AF-3048-2957-DA4EE4B6B13661AB&r=468710288378&m=forgotten", "http://a.b.c/boo?r=468710288378&m=forgotten"},
	{"heritrix StripSessionCFIDsTest", "strip-session-ids", "", "http://a.b.c/boo?CFID=16603925   &CFTOKEN=2AE13EEE-3048-85B0-56CEDAAB0ACA44B8", "http://a.b.c/boo?"},
	{"heritrix StripSessionCFIDsTest", "strip-session-ids", "", "http://a.b.c/boo?CFID=4308017&CFTOKEN=63914124&requestID=200608200458360%2E39414378", "http://a.b.c/boo?requestID=200608200458360%2E39414378"},
	{"heritrix StripWWWNRuleTest", "strip-www", "", "http://WWW.aRchive.Org/index.html", "http://aRchive.Org/index.html"},
	{"heritrix StripWWWNRuleTest", "strip-www", "", "http://www001.aRchive.Org/index.html", "http://aRchive.Org/index.html"},
	{"heritrix StripWWWNRuleTest", "strip-www", "", "http://www3.aRchive.Org/index.html", "http://aRchive.Org/index.html"},
	{"heritrix StripWWWRuleTest", "strip-www", "", "http://WWW.aRchive.Org/index.html", "http://aRchive.Org/index.html"},
	{"heritrix StripUserinfoRuleTest", "strip-userinfo", "", "http://stack:password@WWW.aRchive.Org/index.html", "http://WWW.aRchive.Org/index.html"},
	{"heritrix StripUserinfoRuleTest", "strip-userinfo", "", "http://stack:pass@@@@@@word@WWW.aRchive.Org/index.html", "http://WWW.aRchive.Org/index.html"},
	{"heritrix StripUserinfoRuleTest", "strip-userinfo", "", "ftp://stack:pass@@@@@@word@archive.org/index.html", "ftp://archive.org/index.html"},
	{"heritrix FixupQueryStringTest", "", "", "http://WWW.aRchive.Org/index.html?", "http://WWW.aRchive.Org/index.html"},
	{"heritrix FixupQueryStringTest", "", "", "http://WWW.aRchive.Org/index.html?&", "http://WWW.aRchive.Org/index.html"},
	{"heritrix FixupQueryStringTest", "", "", "http://WWW.aRchive.Org/index.html?&x=y", "http://WWW.aRchive.Org/index.html?x=y"},
	{"heritrix FixupQueryStringTest", "", "", "http://WWW.aRchive.Org/index.html?x=y&", "http://WWW.aRchive.Org/index.html?x=y"},
	{"heritrix LowercaseRuleTest", "", "", "http://WWW.aRchive.Org/index.html", "http://www.archive.org/index.html"},
	{"heritrix RulesCanonicalizationPolicyTest", "crawler", "", "http://archive.org/index.html", "http://archive.org/index.html"},
	{"heritrix RulesCanonicalizationPolicyTest", "crawler", "", "http://www.archive.org/index.html", "http://archive.org/index.html"},
	{"heritrix RulesCanonicalizationPolicyTest", "crawler", "", "http://www.archive.org/index.html?jsessionid=01234567890123456789012345678901", "http://archive.org/index.html"},
	{"heritrix StripExtraSlashes (class doc)", "strip-extra-slashes", "", "http://www.archive.org//A//B/index.html", "http://www.archive.org/A/B/index.html"},

	// crawler-commons: the pairs of BasicURLNormalizerTest /
	// weirdToNormalizedUrls.csv the safe form keeps apart
	// (testdata/urlequiv/differences.txt, reasons slashes, emptyvalue,
	// emptyname).
	{"crawler-commons BasicURLNormalizerTest", "strip-extra-slashes", "", "http://foo.com//aa/bb/foo.html", "http://foo.com/aa/bb/foo.html"},
	{"crawler-commons BasicURLNormalizerTest", "strip-extra-slashes", "", "http://foo.com/aa//bb/foo.html", "http://foo.com/aa/bb/foo.html"},
	{"crawler-commons BasicURLNormalizerTest", "strip-extra-slashes", "", "http://foo.com/aa/bb//foo.html", "http://foo.com/aa/bb/foo.html"},
	{"crawler-commons BasicURLNormalizerTest", "strip-extra-slashes", "", "http://foo.com//aa//bb//foo.html", "http://foo.com/aa/bb/foo.html"},
	{"crawler-commons BasicURLNormalizerTest", "strip-extra-slashes", "", "http://foo.com////aa////bb//foo.html", "http://foo.com/aa/bb/foo.html"},
	{"crawler-commons BasicURLNormalizerTest", "strip-extra-slashes", "", "http://foo.com////aa////bb////foo.html", "http://foo.com/aa/bb/foo.html"},
	{"crawler-commons weirdToNormalizedUrls.csv", "strip-empty-params", "", "http://foo.com/index?a=1&b=", "http://foo.com/index?a=1&b"},
	{"crawler-commons weirdToNormalizedUrls.csv", "strip-empty-params", "", "http://foo.com/index?b=&a=1", "http://foo.com/index?a=1&b"},
	{"crawler-commons weirdToNormalizedUrls.csv", "strip-empty-params", "", "http://foo.com/index?&=1&a=1", "http://foo.com/index?a=1"},
	{"crawler-commons weirdToNormalizedUrls.csv", "strip-empty-params", "", "http://foo.com/index?=1&b=1&a=1", "http://foo.com/index?a=1&b=1"},
	{"safe browsing (via differences.txt)", "strip-extra-slashes", "", "http://host.com//twoslashes?more//slashes", "http://host.com/twoslashes?more//slashes"},

	// w3lib tests/test_url.py.
	{"w3lib canonicalize_url keep_blank_values=False", "strip-empty-params", "", "http://www.example.com/do?b=&a=2", "http://www.example.com/do?a=2"},
	{"w3lib canonicalize_url keep_blank_values=False", "strip-empty-params", "", "http://www.example.com/do?b=&c&a=2", "http://www.example.com/do?a=2"},
	{"w3lib url_query_cleaner remove=True", "", "id", "http://example.com/product.html?id=200&foo=bar&name=wired", "http://example.com/product.html?foo=bar&name=wired"},
	{"w3lib url_query_cleaner remove=True", "", "id,foo", "http://example.com/product.html?id=2&foo=bar&name=wired", "http://example.com/product.html?name=wired"},
	{"w3lib url_query_cleaner remove=True", "", "id,footo", "http://example.com/product.html?id=2&foo=bar&name=wired", "http://example.com/product.html?foo=bar&name=wired"},
	{"w3lib url_query_cleaner remove=True", "", "id", "http://example.com/product.html", "http://example.com/product.html"},
	{"w3lib url_query_cleaner remove=True", "", "id", "http://example.com/product.html?&", "http://example.com/product.html"},

	// Nutch src/plugin/urlnormalizer-regex/sample/regex-normalize-default.test
	// (its session id and default page rules).
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://foo.com/foo.php?PHPSESSID=cdc993a493e899bed04f4d0c8a462a03", "http://foo.com/foo.php"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://foo.com/foo.php?f=2&PHPSESSID=cdc993a493e899bed04f4d0c8a462a03", "http://foo.com/foo.php?f=2"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://foo.com/foo.php?f=2&PHPSESSID=cdc993a493e899bed04f4d0c8a462a03&q=3", "http://foo.com/foo.php?f=2&q=3"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://foo.com/foo.php?PHPSESSID=cdc993a493e899bed04f4d0c8a462a03&f=2", "http://foo.com/foo.php?f=2"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://www.foo.com/foo.php?Bv_SessionID=fassassddsajkl", "http://www.foo.com/foo.php"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://www.foo.com/foo.php?Bv_SessionID=fassassddsajkl&x=y", "http://www.foo.com/foo.php?x=y"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://www.foo.com/foo.html;jsessionid=1E6FEC0D14D044541DD84D2D013D29ED", "http://www.foo.com/foo.html"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://www.foo.com/foo.html;jsessionid=1E6FEC0D14D044541DD84D2D013D29ED?param=1&another=2", "http://www.foo.com/foo.html?param=1&another=2"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://www.foo.com/foo.html?_sessionID=824A6C0A13a7e11205wxN28F44E3", "http://www.foo.com/foo.html"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://www.foo.com/foo.php?_sessionid=qmyrcedt&outputformat=html&path=/3_images/foo", "http://www.foo.com/foo.php?outputformat=html&path=/3_images/foo"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://www.foo.com/foo.php?_pid=2&_spid=0&lang=en&_sessionid=e36902d5bb2d0d922fc24b43", "http://www.foo.com/foo.php?_pid=2&_spid=0&lang=en"},
	{"nutch regex-normalize-default.test", "strip-session-ids", "", "http://www.foo.com/foo.php?app=content&content=overview&lang=en&_sid=587fba8f825b05844526519fdb7d75c8&b=35&m=47", "http://www.foo.com/foo.php?app=content&content=overview&lang=en&b=35&m=47"},
	{"nutch regex-normalize-default.test", "strip-index-pages", "", "http://www.foo.com/home/index.html", "http://www.foo.com/home/"},
	{"nutch regex-normalize-default.test", "strip-extra-slashes", "", "http://www.foo.com//path//foo.html", "http://www.foo.com/path/foo.html"},
	{"nutch regex-normalize-default.test", "strip-extra-slashes", "", "https://www.foo.com//path//foo.html", "https://www.foo.com/path/foo.html"},
	{"nutch regex-normalize-default.test", "", "", "http://www.foo.com/foo.html?&x=y", "http://www.foo.com/foo.html?x=y"},
	{"nutch regex-normalize-default.test", "", "", "http://www.foo.com/foo.html?x=y&&&z=a", "http://www.foo.com/foo.html?x=y&z=a"},
	{"nutch regex-normalize-default.test", "", "", "http://www.foo.com/foo.html?", "http://www.foo.com/foo.html"},
	// Nutch urlnormalizer-slash TestSlashURLNormalizer: the pairs it
	// changes, per host adding or removing the slash; one key either way.
	{"nutch TestSlashURLNormalizer", "strip-trailing-slash", "", "http://www.example.org/page", "http://www.example.org/page/"},
	{"nutch TestSlashURLNormalizer", "strip-trailing-slash", "", "http://www.example.net/path/to/something/", "http://www.example.net/path/to/something"},
	{"nutch TestSlashURLNormalizer", "strip-trailing-slash", "", "http://www.example.org/page?a=b&c=d", "http://www.example.org/page/?a=b&c=d"},
	{"nutch TestSlashURLNormalizer", "strip-trailing-slash", "", "http://www.example.net/path/to/something/?a=b&c=d", "http://www.example.net/path/to/something?a=b&c=d"},
	{"nutch TestSlashURLNormalizer", "strip-trailing-slash", "", "http://www.example.org/this.is.not.an_extension", "http://www.example.org/this.is.not.an_extension/"},
	{"nutch TestSlashURLNormalizer", "strip-trailing-slash", "", "http://example.org", "http://example.org/"},
	// Nutch urlnormalizer-protocol TestProtocolURLNormalizer (per host
	// https to http or back; one key either way).
	{"nutch TestProtocolURLNormalizer", "fold-scheme", "", "https://example.org/", "http://example.org/"},
	{"nutch TestProtocolURLNormalizer", "fold-scheme", "", "https://example.net/", "http://example.net/"},
	{"nutch TestProtocolURLNormalizer", "fold-scheme", "", "http://example.io/", "https://example.io/"},
	{"nutch TestProtocolURLNormalizer", "fold-scheme", "", "http://example.nl/", "https://example.nl/"},
}

// nutchIndexPages are the default pages of Nutch's regex-normalize test
// (the rule is commented out in its shipped regex-normalize.xml): each
// is "/" with strip-index-pages.
var nutchIndexPages = []string{
	"index.html", "index.htm", "index.asp", "index.aspx", "index.php", "index.php3",
	"default.html", "default.htm", "default.asp", "default.aspx", "default.php", "default.php3",
	"index.phtml", "index.cfm", "index.cgi", "index.HTML", "index.Htm", "index.ASP", "index.jsp",
	"index.jsf", "index.jspx", "index.jspa", "index.aspX", "index.PhP", "index.PhP4", "default.HTml",
	"default.HTm", "default.ASp", "default.AspX", "default.PHP", "default.PHP3",
}

// ruleNegatives are pairs of different pages that stay two keys with every
// rule on (and so with any of them).
var ruleNegatives = []struct{ source, a, b string }{
	{"heritrix StripSessionIDsTest (not 32 characters)", heritrixBase + "?jsessionid=" + heritrixStr32 + "0", heritrixBase},
	{"heritrix StripWWWRuleTest", "http://wWWW.aRchive.Org/index.html", "http://aRchive.Org/index.html"},
	{"heritrix StripWWWRuleTest", "http://ww.aRchive.Org/index.html", "http://aRchive.Org/index.html"},
	{"heritrix StripWWWNRule (slash page kept)", "http://www.archive.org/", "http://archive.org/"},
	{"nutch regex-normalize-default.test (NUTCH-706)", "http://www.foo.com/fa/newsdetail.aspx?NewsID=1567539", "http://www.foo.com/fa/newsdetail.aspx"},
	{"nutch regex-normalize-default.test (NUTCH-1328)", "http://www.foo.com/home.cfm?language=en&country=uk&addressid=250646&pagingpos=0", "http://www.foo.com/home.cfm?language=en&country=uk&pagingpos=0"},
	{"nutch regex-normalize-default.test", "http://www.foo.com/index.jspfx", "http://www.foo.com/"},
	{"nutch regex-normalize-default.test", "http://www.foo.com/index.jsps", "http://www.foo.com/"},
	{"nutch regex-normalize-default.test", "http://www.foo.com/something.php3", "http://www.foo.com/"},
	{"nutch regex-normalize-default.test", "http://www.foo.com/foo.html", "http://www.foo.com/"},
	{"nutch TestProtocolURLNormalizer (other port)", "https://example.org:80/", "http://example.org/"},
	{"w3lib url_query_cleaner (footo is not foo)", "http://example.com/product.html?foobar=wired", "http://example.com/product.html"},
	{"issue: other ids", "http://example.com/item?id=1", "http://example.com/item?id=2"},
	{"issue: path case", "http://example.com/Page", "http://example.com/page"},
	{"issue: query case", "http://example.com/p?q=Shoes", "http://example.com/p?q=shoes"},
	{"issue: other hosts", "http://www.example.com/a", "http://example.org/a"},
	{"issue: sub-domains", "http://shop.example.com/a", "http://example.com/a"},
	{"issue: www as the name", "http://www.com/a", "http://com/a"},
	{"issue: sid that is no session", "http://example.com/story?sid=42", "http://example.com/story"},
	{"issue: cfid alone", "http://example.com/a?cfid=12", "http://example.com/a"},
	{"issue: empty value vs value", "http://example.com/a?x=", "http://example.com/a?x=1"},
	{"issue: non-default port", "http://example.com:8080/", "http://example.com/"},
	{"issue: index page with a query", "http://example.com/index.php?p=2", "http://example.com/"},
}

// notApplied are cases of the anchors' tests the rules decide otherwise,
// on purpose; merged says whether the pair is one key with the rules
// (every rule if none are named).
var notApplied = []struct {
	source, rules, a, b string
	merged              bool
	why                 string
}{
	{"heritrix StripWWWRuleTest", "strip-www", "http://www001.aRchive.Org/index.html", "http://aRchive.Org/index.html", true,
		"StripWWWRule (not a default) keeps www001; strip-www is StripWWWNRule, the default, which strips it"},
	{"nutch regex-normalize-default.test", "", "http://www.foo.com/foo.php?&x=1&sid=xyz&something=1", "http://www.foo.com/foo.php?x=1&something=1", false,
		"Nutch strips sid of any value; Heritrix only of 32 letters and digits, and keeps a 33-character id apart: sid=42 is often a story id"},
	{"nutch regex-normalize-default.test", "", "http://www.foo.com/foo.html?param=1&another=2;jsessionid=1E6FEC0D14D044541DD84D2D013D29ED", "http://www.foo.com/foo.html?param=1&another=2", false,
		";jsessionid= is a path parameter; inside a query value it is the value"},
	{"nutch regex-normalize-default.test", "", "http://www.foo.com/foo.html#something?x=y", "http://www.foo.com/foo.html?x=y", false,
		"after '#' everything is the fragment (RFC 3986), which the safe form drops"},
	{"w3lib url_query_cleaner (keep lists)", "", "http://example.com/product.html?id=200&foo=bar&name=wired", "http://example.com/product.html?id=200", false,
		"keep-lists (strip every parameter but the named ones) are not offered: a site's next parameter would vanish from every key"},
}

// everydayPairs are the pairs of the issue that the safe form keeps apart,
// each with the one rule meant for it.
var everydayPairs = []struct{ rule, a, b string }{
	{"strip-tracking", "https://example.com/item?utm_source=x&id=1", "https://example.com/item?id=1"},
	{"strip-tracking", "https://example.com/item?fbclid=abc", "https://example.com/item"},
	{"strip-tracking", "https://example.com/item?gclid=Cj0KCQ&q=shoes&_ga=2.1.2.3", "https://example.com/item?q=shoes"},
	{"strip-session-ids", "https://example.com/cart;jsessionid=1E6FEC0D14D044541DD84D2D013D29ED", "https://example.com/cart"},
	{"strip-session-ids", "https://example.com/a.php?PHPSESSID=cdc993a493e899bed04f4d0c8a462a03", "https://example.com/a.php"},
	{"strip-session-ids", "https://example.com/forum?sid=9682993c8daa2c5497996114facdc805&t=5", "https://example.com/forum?t=5"},
	{"strip-www", "https://www.example.com/a", "https://example.com/a"},
	{"fold-scheme", "http://example.com/a", "https://example.com/a"},
	{"strip-trailing-slash", "https://example.com/a/", "https://example.com/a"},
	{"strip-index-pages", "https://example.com/index.html", "https://example.com/"},
	{"strip-userinfo", "https://user:pw@example.com/a", "https://example.com/a"},
	{"strip-empty-params", "https://example.com/a?x=", "https://example.com/a"},
}

func mustRules(t testing.TB, rules, params string) *URLRules {
	t.Helper()
	r, err := ParseURLRules(splitList(rules), splitList(params))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

var allRules = strings.Join(URLRuleNames(), ",")

func ruleKey(t *testing.T, raw string, r *URLRules) string {
	t.Helper()
	k, err := NormalizeURLRules(nil, raw, r)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return string(k)
}

func TestURLRulesAnchorVectors(t *testing.T) {
	for _, v := range ruleVectors {
		r := mustRules(t, v.rules, v.params)
		if a, b := ruleKey(t, v.a, r), ruleKey(t, v.b, r); a != b {
			t.Errorf("%s, rules %q params %q: not one key:\n\t%q → %q\n\t%q → %q", v.source, v.rules, v.params, v.a, a, v.b, b)
		}
	}
	r := mustRules(t, "strip-index-pages", "")
	for _, page := range nutchIndexPages {
		if k := ruleKey(t, "http://www.foo.com/"+page, r); k != "http://www.foo.com/" {
			t.Errorf("nutch regex-normalize-default.test: %s → %q, want http://www.foo.com/", page, k)
		}
	}
	t.Logf("%d anchor pairs and %d default pages one key with their rules", len(ruleVectors), len(nutchIndexPages))
}

func TestURLRulesNegativeVectors(t *testing.T) {
	for _, set := range []string{"", allRules} {
		r := mustRules(t, set, "utm_*,ref")
		for _, v := range ruleNegatives {
			if a, b := ruleKey(t, v.a, r), ruleKey(t, v.b, r); a == b {
				t.Errorf("%s, rules %q: %q and %q are one key %q", v.source, set, v.a, v.b, a)
			}
		}
	}
}

func TestURLRulesNotApplied(t *testing.T) {
	for _, v := range notApplied {
		rules := v.rules
		if rules == "" {
			rules = allRules
		}
		r := mustRules(t, rules, "")
		if a, b := ruleKey(t, v.a, r), ruleKey(t, v.b, r); (a == b) != v.merged {
			t.Errorf("%s: %q and %q: one key %v, want %v (%s)", v.source, v.a, v.b, a == b, v.merged, v.why)
		}
	}
}

// TestURLRulesEverydayPairs: each pair is one key with its rule, and two
// keys with no rule and with every other rule.
func TestURLRulesEverydayPairs(t *testing.T) {
	for _, p := range everydayPairs {
		var others []string
		for _, n := range URLRuleNames() {
			if n != p.rule && n != PresetCrawler {
				others = append(others, n)
			}
		}
		for _, c := range []struct {
			rules string
			want  bool
		}{{p.rule, true}, {"", false}, {strings.Join(others, ","), false}} {
			r := mustRules(t, c.rules, "")
			if a, b := ruleKey(t, p.a, r), ruleKey(t, p.b, r); (a == b) != c.want {
				t.Errorf("rules %q: %q and %q one key %v, want %v (%q, %q)", c.rules, p.a, p.b, a == b, c.want, a, b)
			}
		}
	}
}

// TestURLRulesForms pins what each rule writes.
func TestURLRulesForms(t *testing.T) {
	for _, c := range []struct{ rules, params, in, want string }{
		{"fold-scheme", "", "HTTPS://Example.com:443/a", "http://example.com/a"},
		{"fold-scheme", "", "https://example.com:8443/a", "https://example.com:8443/a"},
		{"fold-scheme", "", "wss://example.com/a", "wss://example.com/a"},
		{"strip-www", "", "http://www.www2.example.com/a", "http://example.com/a"},
		{"strip-www", "", "http://www.example.com/?a=1", "http://example.com/?a=1"},
		{"strip-www", "", "http://www.example.com:8080/a", "http://example.com:8080/a"},
		{"strip-www", "", "ftp://www.example.com/a", "ftp://www.example.com/a"},
		{"strip-www", "", "http://wwwx.example.com/a", "http://wwwx.example.com/a"},
		{"strip-session-ids", "", "http://e.com/a;JSESSIONID=x.node1;v=2/b;jsessionid=y", "http://e.com/a;v=2/b"},
		{"strip-session-ids", "", "http://e.com/a?cftoken=2&x=1&cfid=1", "http://e.com/a?x=1"},
		{"strip-session-ids", "", "http://e.com/a?sid", "http://e.com/a?sid"},
		{"strip-extra-slashes", "", "http://e.com///a//b//", "http://e.com/a/b/"},
		{"strip-extra-slashes", "", "foo://e.com//a", "foo://e.com//a"},
		{"strip-index-pages,strip-trailing-slash", "", "http://e.com/a/index.html/", "http://e.com/a"},
		{"strip-index-pages,strip-trailing-slash", "", "http://e.com/index.php/index.html", "http://e.com/"},
		{"strip-index-pages", "", "http://e.com/index.html.bak", "http://e.com/index.html.bak"},
		{"strip-trailing-slash", "", "http://e.com/", "http://e.com/"},
		{"strip-tracking", "", "http://e.com/?UTM_Source=a&utm_=b&utmx=c", "http://e.com/?utmx=c"},
		{"strip-tracking", "", "http://e.com/?utm%5Fsource=a&q=1", "http://e.com/?q=1"},
		{"", "ref,*_id,x*y", "http://e.com/?ref=a&REF=b&refs=c&camp_id=1&xay=2&xa=3", "http://e.com/?refs=c&xa=3"},
		{"strip-empty-params", "", "http://e.com/?a&b=&=c&d==&e=1", "http://e.com/?d==&e=1"},
		{"crawler", "", "HTTP://u:p@WWW.Example.com/A?PHPSESSID=" + heritrixStr32 + "&utm_source=x", "http://example.com/A?utm_source=x"},
	} {
		r := mustRules(t, c.rules, c.params)
		if got := ruleKey(t, c.in, r); got != c.want {
			t.Errorf("rules %q params %q: %q → %q, want %q", c.rules, c.params, c.in, got, c.want)
		}
	}
}

func TestParseURLRules(t *testing.T) {
	r, err := ParseURLRules([]string{" Strip-WWW", "crawler", "strip-tracking", ""}, []string{"Ref", "utm_*", "ref", " "})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Names(), "strip-userinfo,strip-www,strip-session-ids,strip-tracking"; got != want {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	if got, want := r.StripParams(), "ref,utm_*"; got != want {
		t.Errorf("StripParams() = %q, want %q", got, want)
	}
	if r, err := ParseURLRules(nil, []string{""}); r != nil || err != nil {
		t.Errorf("no rules: %v, %v; want nil, nil", r, err)
	}
	for _, bad := range [][2][]string{
		{{"strip-everything"}, nil},
		{nil, {"a=b"}},
		{nil, {"*"}},
		{nil, {"a&b"}},
	} {
		if _, err := ParseURLRules(bad[0], bad[1]); err == nil {
			t.Errorf("ParseURLRules(%q, %q): no error", bad[0], bad[1])
		}
	}
	if _, err := NewExtractor("key", "lower", 0, WithURLRules(r)); err == nil {
		t.Error("URL rules with --normalize lower: no error")
	}
	e, err := NewExtractor("key", "url", 0, WithURLRules(r))
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Extract(nil, []byte("https://www.example.com/a?utm_source=x&ref=y"), nil, nil)
	if err != nil || string(k) != "https://example.com/a" {
		t.Errorf("Extract = %q, %v; want https://example.com/a", k, err)
	}
}

// TestTrackingParamsPinned: the built-in list is part of the key
// definition of every memory written with strip-tracking (only the rule's
// name is recorded). Changing it changes which URLs are one key under
// the same recorded settings: add a rule with a new name instead.
func TestTrackingParamsPinned(t *testing.T) {
	const pinned = "utm_*,gclid,gclsrc,dclid,gbraid,wbraid,_ga,_gl,srsltid,fbclid,msclkid,mc_cid,mc_eid," +
		"_hsenc,_hsmi,__hssc,__hstc,__hsfp,hsctatracking,mkt_tok,yclid,_openstat,twclid,ttclid,igshid,li_fat_id," +
		"oly_anon_id,oly_enc_id,vero_conv,vero_id,wickedid,rb_clickid,s_cid,ml_subscriber,ml_subscriber_hash,pk_campaign,pk_kwd"
	if got := strings.Join(TrackingParams(), ","); got != pinned {
		t.Errorf("the tracking list changed:\n got  %s\n want %s", got, pinned)
	}
}

// presetCrawlerMask is the crawler preset's rules, for fuzz seeds.
func presetCrawlerMask() URLRule { return urlPresets[PresetCrawler] }
