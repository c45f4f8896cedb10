package worker

import (
	"github.com/bloomgate/bloomgate/internal/brokercheck"
)

// Authentication and authorization failures (brokercheck) are not waited
// out. At start the worker stops at the first one: the topic check reads
// the topics' ACLs (KIP-430) before the group is joined, and a refused
// login or group ACL before the first generation stops Run. At runtime the
// consumer group, the partitions and the committer retry as for any
// failure, under brokercheck.Watch's rule: logged at ERROR, and the worker
// stops once such failures have gone on for brokercheck.DefaultGiveUp.

// brokerCheck is the worker's client description for brokercheck: how it
// connects and which ACLs it needs.
func (w *Worker) brokerCheck() *brokercheck.Client {
	c := &brokercheck.Client{
		Brokers:     w.cfg.Brokers,
		TLS:         w.cfg.Transport.TLS,
		SASL:        w.cfg.Transport.SASL,
		Username:    w.cfg.SASLUsername,
		Component:   "the worker",
		DialTimeout: w.cfg.Dialer.Timeout,
	}
	topic := func(name, setting string, op brokercheck.Op) {
		if name != "" {
			c.Needs = append(c.Needs, brokercheck.Need{Resource: brokercheck.TopicResource, Name: name, Setting: setting, Op: op})
		}
	}
	topic(w.cfg.Input, "--input", brokercheck.Read)
	for _, t := range []struct{ name, setting string }{{w.cfg.Output, "--output"}, {w.cfg.Duplicates, "--duplicates"}, {w.cfg.DeadLetter, "--dead-letter"}} {
		topic(t.name, t.setting, brokercheck.Write)
		topic(t.name, t.setting, brokercheck.Read) // the recovery scan reads what was written
	}
	topic(w.cfg.SeedTopic, "--seed-topic", brokercheck.Read)
	c.Needs = append(c.Needs, brokercheck.Need{Resource: brokercheck.GroupResource, Name: w.cfg.Group, Setting: "--group", Op: brokercheck.Read})
	return c
}

// accessFailed reports whether err is refused access; if so it logs it or,
// once the runtime rule says so, stops the worker with it.
func (w *Worker) accessFailed(err error) bool {
	refused, stop := w.access.Failed(err)
	if stop != nil {
		w.stop(stop)
	}
	return refused
}
