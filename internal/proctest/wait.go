package proctest

import (
	"fmt"
	"regexp"
	"time"
)

// WaitUntil calls ready every interval until it returns true. It returns an
// error naming what (a noun phrase, e.g. "its metrics address") when limit
// passes first, or when the process exits before ready returns true.
func (p *Proc) WaitUntil(what string, limit, interval time.Duration, ready func() bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.done:
			if ready() { // it may have got there just before exiting
				return nil
			}
			return fmt.Errorf("%s exited (%v) before %s", p.name, p.err, what)
		case <-deadline.C:
			return fmt.Errorf("%s: no %s within %s", p.name, what, limit)
		case <-tick.C:
		}
	}
}

// WaitFor waits up to limit until the retained output matches re, and
// returns the last submatch (the whole match if re has no group).
func (p *Proc) WaitFor(re *regexp.Regexp, limit time.Duration) (string, error) {
	var m []string
	err := p.WaitUntil(fmt.Sprintf("output matching %q", re), limit, 50*time.Millisecond, func() bool {
		m = re.FindStringSubmatch(p.Output())
		return m != nil
	})
	if err != nil {
		return "", err
	}
	return m[len(m)-1], nil
}
