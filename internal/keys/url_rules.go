package keys

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// URLRule is one opt-in canonicalization rule applied on top of the safe
// canonical form of NormalizeURL (see NormalizeURLRules). Each merges
// spellings that usually name one page but, unlike the safe form, not
// always: a crawler operator turns on the ones that hold for the sites
// crawled. docs/urls.md has the table of what each merges, what it risks,
// and which crawler applies it by default.
type URLRule uint16

// The rules, in the order NormalizeURLRules applies them and Names lists
// them.
const (
	// RuleFoldScheme: https is written http (only without an explicit
	// port other than the scheme's default).
	RuleFoldScheme URLRule = 1 << iota
	// RuleStripUserinfo: the user name and password are dropped.
	RuleStripUserinfo
	// RuleStripWWW: a leading "www." or "wwwN." label is dropped from the
	// host of an http(s) URL, except for the site's top page "/" without
	// a query (Heritrix's StripWWWNRule), and if a dot remains.
	RuleStripWWW
	// RuleStripSessionIDs: session ids in the query (jsessionid,
	// phpsessid, sid and _sid of 32 letters and digits; aspsessionidXXXXXXXX
	// of 24 letters; cfid with cftoken; sessionid, _sessionid and
	// bv_sessionid) and the ;jsessionid= path parameter are dropped.
	RuleStripSessionIDs
	// RuleStripExtraSlashes: runs of '/' in the path of an http(s) URL
	// become one.
	RuleStripExtraSlashes
	// RuleStripIndexPages: a last path segment index.* or default.* with
	// a server-page extension (html, php, asp, jsp… as Nutch's
	// regex-normalize lists them) is dropped: /a/index.html is /a/.
	RuleStripIndexPages
	// RuleStripTrailingSlash: a trailing '/' of a path other than "/" is
	// dropped: /a/ is /a.
	RuleStripTrailingSlash
	// RuleStripTracking: query parameters of the built-in tracking list
	// (TrackingParams) are dropped.
	RuleStripTracking
	// RuleStripEmptyParams: query parameters with an empty value (x=, x)
	// or an empty name (=1) are dropped.
	RuleStripEmptyParams
)

var urlRuleNames = []struct {
	rule URLRule
	name string
}{
	{RuleFoldScheme, "fold-scheme"},
	{RuleStripUserinfo, "strip-userinfo"},
	{RuleStripWWW, "strip-www"},
	{RuleStripSessionIDs, "strip-session-ids"},
	{RuleStripExtraSlashes, "strip-extra-slashes"},
	{RuleStripIndexPages, "strip-index-pages"},
	{RuleStripTrailingSlash, "strip-trailing-slash"},
	{RuleStripTracking, "strip-tracking"},
	{RuleStripEmptyParams, "strip-empty-params"},
}

// PresetCrawler is the set of rules Heritrix applies by default
// (RulesCanonicalizationPolicy: LowercaseRule, StripUserinfoRule,
// StripWWWNRule, StripSessionIDs, StripSessionCFIDs, FixupQueryString), as
// far as the safe canonical form does not already do it: the safe form
// lower-cases scheme and host and drops an empty query and empty
// parameters; the path and query keep their case, because /Page and /page
// are different pages on most servers.
const PresetCrawler = "crawler"

var urlPresets = map[string]URLRule{
	PresetCrawler: RuleStripUserinfo | RuleStripWWW | RuleStripSessionIDs,
}

// URLRuleNames lists the names of every rule, then of every preset, for
// help texts and errors.
func URLRuleNames() []string {
	var n []string
	for _, r := range urlRuleNames {
		n = append(n, r.name)
	}
	return append(n, PresetCrawler)
}

// URLRules is a parsed set of rules and stripped parameters. A nil
// *URLRules applies no rule. It is immutable and safe for concurrent use.
type URLRules struct {
	set    URLRule
	params paramSet
	extra  []string // the operator's patterns, normalized, sorted, unique
}

// ParseURLRules parses rule names and presets (case-insensitive) and the
// operator's parameter patterns: names compared without regard to ASCII
// case, in which '*' matches any run of characters (utm_*, ref). The
// parameters are stripped whether or not strip-tracking is on;
// strip-tracking adds the built-in list. With neither rules nor
// parameters it returns nil: no rules.
func ParseURLRules(rules, stripParams []string) (*URLRules, error) {
	r := &URLRules{}
	for _, name := range rules {
		n := strings.ToLower(strings.TrimSpace(name))
		if n == "" {
			continue
		}
		if set, ok := urlPresets[n]; ok {
			r.set |= set
			continue
		}
		i := slices.IndexFunc(urlRuleNames, func(x struct {
			rule URLRule
			name string
		}) bool {
			return x.name == n
		})
		if i < 0 {
			return nil, fmt.Errorf("url rule %q: must be one of %s", name, strings.Join(URLRuleNames(), ", "))
		}
		r.set |= urlRuleNames[i].rule
	}
	for _, raw := range stripParams {
		pat := strings.TrimSpace(raw)
		if pat == "" {
			continue
		}
		if strings.ContainsAny(pat, "&=#") || strings.Trim(pat, "*") == "" {
			return nil, fmt.Errorf("url strip param %q: must be a parameter name, with '*' matching any run of characters (utm_*), and no '&', '=' or '#'", raw)
		}
		// Compared with names in their canonical form: escapes of
		// unreserved characters decoded, others upper-case.
		norm := strings.ToLower(string(appendPercentNormalized(nil, pat, isQueryChar)))
		if !slices.Contains(r.extra, norm) {
			r.extra = append(r.extra, norm)
		}
	}
	if r.set == 0 && len(r.extra) == 0 {
		return nil, nil
	}
	slices.Sort(r.extra)
	pats := r.extra
	if r.set&RuleStripTracking != 0 {
		pats = append(slices.Clone(trackingParams), pats...)
	}
	r.params = newParamSet(pats)
	return r, nil
}

// has reports whether rule is on; a nil r has none.
func (r *URLRules) has(rule URLRule) bool { return r != nil && r.set&rule != 0 }

// Names returns the rules on, expanded from presets, comma-separated in
// the canonical order; "" for none. Two sets of rules are the same iff
// their Names and StripParams are.
func (r *URLRules) Names() string {
	if r == nil {
		return ""
	}
	var n []string
	for _, x := range urlRuleNames {
		if r.set&x.rule != 0 {
			n = append(n, x.name)
		}
	}
	return strings.Join(n, ",")
}

// StripParams returns the operator's parameter patterns, normalized and
// sorted, comma-separated; "" for none.
func (r *URLRules) StripParams() string {
	if r == nil {
		return ""
	}
	return strings.Join(r.extra, ",")
}

// NormalizeURLRules appends the canonical form of raw (NormalizeURL) with
// the rules r applied on top (nil: none) to dst. The rules only remove
// parts of the safe form or rewrite https as http; the result is still a
// fixed point: normalizing it again with the same rules returns it
// unchanged. The rules' cost is a few comparisons per query parameter and
// path; they allocate nothing beyond NormalizeURL's (BenchmarkNormalizeURL,
// rules=all).
func NormalizeURLRules(dst []byte, raw string, r *URLRules) ([]byte, error) {
	return normalizeURL(dst, raw, r)
}

// ErrURLRulesNeedURL is returned (wrapped) by NewExtractor when URL rules
// are given with a normalization other than url.
var ErrURLRulesNeedURL = errors.New("url rules apply to --normalize url only")

// WithURLRules applies the rules r on top of the url normalization.
func WithURLRules(r *URLRules) Option { return func(e *Extractor) { e.urlRules = r } }

// wwwPrefix returns the length of the leading "www." / "wwwN." labels of
// the canonical host h to drop, or 0: repeated (www.www.example.com) so
// that the result is a fixed point, and only while a dot remains, so that
// www.com stays as it is.
func wwwPrefix(h []byte) int {
	n := 0
	for {
		rest := h[n:]
		if len(rest) < 4 || rest[0] != 'w' || rest[1] != 'w' || rest[2] != 'w' {
			return n
		}
		i := 3
		for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
			i++
		}
		if i >= len(rest) || rest[i] != '.' || !slices.Contains(rest[i+1:], '.') {
			return n
		}
		n += i + 1
	}
}

// removeSessionPathParams drops every ";jsessionid=…" path parameter (up
// to the next ';' or '/') of the path in dst[at:], in place. The Servlet
// specification reserves the name for the session id, so any value is
// one.
func removeSessionPathParams(dst []byte, at int) []byte {
	const name = ";jsessionid="
	w := at
	for r := at; r < len(dst); {
		if dst[r] == ';' && len(dst)-r >= len(name) && equalFoldASCII(dst[r:r+len(name)], name) {
			r += len(name)
			for r < len(dst) && dst[r] != ';' && dst[r] != '/' {
				r++
			}
			continue
		}
		dst[w] = dst[r]
		w++
		r++
	}
	return dst[:w]
}

// rewritePath applies the path rules to the canonical path dst[at:] of an
// http(s) URL, which starts with '/' and has no dot segments.
func (r *URLRules) rewritePath(dst []byte, at int) []byte {
	if r.has(RuleStripExtraSlashes) {
		w := at
		for i := at; i < len(dst); i++ {
			if dst[i] == '/' && w > at && dst[w-1] == '/' {
				continue
			}
			dst[w] = dst[i]
			w++
		}
		dst = dst[:w]
	}
	index, slash := r.has(RuleStripIndexPages), r.has(RuleStripTrailingSlash)
	for changed := index || slash; changed; {
		changed = false
		if index {
			last := at + lastIndexByte(dst[at:], '/') + 1
			if isIndexPage(dst[last:]) {
				dst, changed = dst[:last], true
			}
		}
		if slash && len(dst)-at > 1 && dst[len(dst)-1] == '/' {
			dst, changed = dst[:len(dst)-1], true
		}
	}
	return dst
}

func lastIndexByte(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// isIndexPage reports whether the path segment s is a default page as
// Nutch's regex-normalize names them: (index|default) '.' and an
// extension matching js[pf][afx]?|cgi|cfm|aspx?|[psx]?html?|php[3456]?,
// without regard to case.
func isIndexPage(s []byte) bool {
	var ext []byte
	switch {
	case len(s) > 6 && equalFoldASCII(s[:6], "index."):
		ext = s[6:]
	case len(s) > 8 && equalFoldASCII(s[:8], "default."):
		ext = s[8:]
	default:
		return false
	}
	var e [6]byte
	if len(ext) > len(e) {
		return false
	}
	for i, c := range ext {
		e[i] = lowerASCII(c)
	}
	x := string(e[:len(ext)]) // no allocation: compared only
	switch x {
	case "cgi", "cfm", "asp", "aspx", "php", "php3", "php4", "php5", "php6":
		return true
	}
	if len(x) >= 3 && x[:2] == "js" && (x[2] == 'p' || x[2] == 'f') {
		return len(x) == 3 || len(x) == 4 && (x[3] == 'a' || x[3] == 'f' || x[3] == 'x')
	}
	if len(x) > 0 && (x[0] == 'p' || x[0] == 's' || x[0] == 'x') {
		x = x[1:]
	}
	return x == "htm" || x == "html"
}

func equalFoldASCII(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if lowerASCII(b[i]) != lower[i] {
			return false
		}
	}
	return true
}

// coldFusion tracks the cfid and cftoken parameters of one query: a
// ColdFusion session is the pair, so either alone is kept.
type coldFusion struct {
	cfid, cftoken bool
}

func (c coldFusion) pair() bool { return c.cfid && c.cftoken }

// dropParam reports whether the rules drop the canonical query parameter
// p ("name=value", "name" or "=value"); it notes ColdFusion's parameters
// in cf, which are dropped as a pair after the whole query was read.
func (r *URLRules) dropParam(p []byte, cf *coldFusion) bool {
	name, value, hasValue := p, p[:0], false
	if i := indexByte(p, '='); i >= 0 {
		name, value, hasValue = p[:i], p[i+1:], true
	}
	if r.set&RuleStripEmptyParams != 0 && (len(name) == 0 || len(value) == 0) {
		return true
	}
	if r.params.match(name) {
		return true
	}
	if r.set&RuleStripSessionIDs != 0 && hasValue {
		switch len(name) {
		case 3, 4, 9, 10: // sid, _sid, phpsessid, jsessionid; cfid
			if (equalFoldASCII(name, "sid") || equalFoldASCII(name, "_sid") ||
				equalFoldASCII(name, "phpsessid") || equalFoldASCII(name, "jsessionid")) && isAlnum32(value) {
				return true
			}
			if equalFoldASCII(name, "cfid") {
				cf.cfid = true
			}
		case 7:
			if equalFoldASCII(name, "cftoken") {
				cf.cftoken = true
			}
		case 20: // ASPSESSIONID and 8 letters, a value of 24 letters
			if equalFoldASCII(name[:12], "aspsessionid") && allLetters(name[12:]) && len(value) == 24 && allLetters(value) {
				return true
			}
		}
		if len(value) > 0 && (equalFoldASCII(name, "sessionid") || equalFoldASCII(name, "_sessionid") || equalFoldASCII(name, "bv_sessionid")) {
			return true
		}
	}
	return false
}

func indexByte(b []byte, c byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// isAlnum32: the session id shape Heritrix's StripSessionIDs strips,
// exactly 32 ASCII letters and digits.
func isAlnum32(v []byte) bool {
	if len(v) != 32 {
		return false
	}
	for _, c := range v {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

func allLetters(v []byte) bool {
	for _, c := range v {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// removeParams drops the cfid and cftoken parameters from params and
// compacts the query dst[base:] in place ('&' between the rest).
func removeParams(dst []byte, base int, params [][2]int) ([]byte, [][2]int) {
	w, kept := base, params[:0]
	for _, p := range params {
		b := dst[p[0]:p[1]]
		name := b
		if i := indexByte(b, '='); i >= 0 {
			name = b[:i]
		}
		if equalFoldASCII(name, "cfid") || equalFoldASCII(name, "cftoken") {
			continue
		}
		if len(kept) > 0 {
			dst[w] = '&'
			w++
		}
		s := w
		w += copy(dst[w:], b)
		kept = append(kept, [2]int{s, w})
	}
	return dst[:w], kept
}

// paramSet matches parameter names against patterns without regard to
// ASCII case: exact names by length, "prefix*" patterns, other globs.
type paramSet struct {
	exact  [][]string // exact[len] lists the lower-case names of that length
	prefix []string   // lower-case, from "prefix*"
	globs  []string   // lower-case, with '*' elsewhere
}

func newParamSet(pats []string) paramSet {
	var s paramSet
	for _, p := range pats {
		p = strings.ToLower(p)
		star := strings.IndexByte(p, '*')
		switch {
		case star < 0:
			for len(s.exact) <= len(p) {
				s.exact = append(s.exact, nil)
			}
			s.exact[len(p)] = append(s.exact[len(p)], p)
		case star == len(p)-1:
			s.prefix = append(s.prefix, p[:star])
		default:
			s.globs = append(s.globs, p)
		}
	}
	return s
}

func (s *paramSet) match(name []byte) bool {
	if len(name) < len(s.exact) {
		for _, p := range s.exact[len(name)] {
			if equalFoldASCII(name, p) {
				return true
			}
		}
	}
	for _, p := range s.prefix {
		if len(name) >= len(p) && equalFoldASCII(name[:len(p)], p) {
			return true
		}
	}
	for _, g := range s.globs {
		if globMatch(g, name) {
			return true
		}
	}
	return false
}

// globMatch matches name against the lower-case pattern g, in which '*'
// matches any run of bytes, without regard to the ASCII case of name.
func globMatch(g string, name []byte) bool {
	gi, ni := 0, 0
	star, mark := -1, 0
	for ni < len(name) {
		switch {
		case gi < len(g) && g[gi] == '*':
			star, mark = gi, ni
			gi++
		case gi < len(g) && g[gi] == lowerASCII(name[ni]):
			gi++
			ni++
		case star >= 0:
			gi, mark = star+1, mark+1
			ni = mark
		default:
			return false
		}
	}
	for gi < len(g) && g[gi] == '*' {
		gi++
	}
	return gi == len(g)
}

// trackingParams is the built-in list of strip-tracking: parameters that
// only tell an analytics or ad system where a click came from, never
// which page is served. It is part of the key definition of every memory
// written with strip-tracking: TestTrackingParamsPinned holds it, and a
// change needs a new rule name, not an edit.
//
// Sources: Firefox's query stripping list and Brave's query filter (click
// ids of ad and mail systems), and the utm_ campaign parameters of Google
// Analytics, which the URL-cleaning filter lists of ad blockers remove.
var trackingParams = []string{
	"utm_*",                                        // Google Analytics campaigns (utm_source, utm_medium, …)
	"gclid", "gclsrc", "dclid", "gbraid", "wbraid", // Google Ads click ids
	"_ga", "_gl", // Google Analytics cross-domain linker
	"srsltid",          // Google Merchant Center
	"fbclid",           // Facebook
	"msclkid",          // Microsoft Advertising
	"mc_cid", "mc_eid", // Mailchimp
	"_hsenc", "_hsmi", "__hssc", "__hstc", "__hsfp", "hsctatracking", // HubSpot
	"mkt_tok",            // Marketo
	"yclid", "_openstat", // Yandex
	"twclid",                    // Twitter / X
	"ttclid",                    // TikTok
	"igshid",                    // Instagram
	"li_fat_id",                 // LinkedIn
	"oly_anon_id", "oly_enc_id", // Omeda
	"vero_conv", "vero_id", // Vero
	"wickedid",                            // Wicked Reports
	"rb_clickid",                          // Rakuten
	"s_cid",                               // Adobe Analytics
	"ml_subscriber", "ml_subscriber_hash", // MailerLite
	"pk_campaign", "pk_kwd", // Matomo
}

// TrackingParams returns the built-in list of strip-tracking, for docs.
func TrackingParams() []string { return slices.Clone(trackingParams) }
