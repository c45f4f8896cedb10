package preflight

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bloomgate/bloomgate/internal/brokercheck"
	"github.com/bloomgate/bloomgate/internal/config"
	"github.com/bloomgate/bloomgate/internal/quantity"
	"github.com/bloomgate/bloomgate/internal/worker"
)

// kafka reports the worker's start-up reads.
func kafka(r *Report, cfg *config.Run, pf *worker.Preflight, err error) {
	if err != nil {
		fix := ""
		var refused *brokercheck.Error
		if !errors.As(err, &refused) {
			fix = "check --brokers and that this host reaches them"
		}
		r.add(Check{Name: "brokers", Status: Fail, Detail: err.Error(), Fix: fix})
		r.add(Check{Name: "topics", Status: Skip, Detail: "the brokers did not answer"})
		return
	}
	r.add(Check{Name: "brokers", Status: OK, Detail: "answered (" + strings.Join(cfg.Brokers, ",") + ")"})
	usable := true
	for _, t := range pf.Topics {
		c := Check{Name: "topic", Subject: t.Setting + " " + t.Name, Status: OK, Detail: fmt.Sprintf("%d partitions", t.Partitions)}
		switch {
		case t.Problem != "" && t.Setting == "--input" && cfg.Repartition && t.Partitions == 0:
			c.Detail = "does not exist yet: the --repartition hop creates it at start with --output's partition count"
		case t.Problem != "":
			usable = false
			c.Status, c.Detail = Fail, t.Problem
			if name, hint, ok := strings.Cut(t.Problem, ", e.g. "); ok {
				c.Detail, c.Fix = name, hint
			}
		}
		r.add(c)
	}
	switch {
	case pf.Refused != nil:
		r.add(Check{Name: "partitions", Status: Fail, Detail: strings.TrimPrefix(pf.Refused.Error(), worker.ErrTopicConfig.Error()+": ")})
	case !usable || pf.Partitions == 0:
	case cfg.Partitioning == config.PartitioningSame:
		r.add(Check{Name: "partitions", Status: OK, Detail: fmt.Sprintf("--output has the %d partitions of --input, as --partitioning same needs", pf.Partitions)})
	default:
		r.add(Check{Name: "partitions", Status: OK, Detail: "--partitioning hash takes any partition counts"})
	}
	missing := map[string]bool{}
	for _, t := range pf.Topics {
		missing[t.Name] = t.Problem != "" && t.Partitions == 0
	}
	acls(r, pf.Access, missing)
	for _, l := range pf.Limits {
		r.add(limitCheck(pf, l))
	}
}

// acls reports the ACLs by resource: READ and WRITE on one topic in one
// line.
func acls(r *Report, grants []brokercheck.Grant, missing map[string]bool) {
	type res struct {
		resource brokercheck.Resource
		name     string
	}
	var order []res
	by := map[res][]brokercheck.Grant{}
	for _, g := range grants {
		k := res{g.Need.Resource, g.Need.Name}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], g)
	}
	for _, k := range order {
		gs := by[k]
		c := Check{Name: "acl", Subject: fmt.Sprintf("%s %s", gs[0].Need.Setting, k.name), Status: OK}
		if k.resource == brokercheck.TopicResource && missing[k.name] {
			c.Status, c.Detail = Skip, "the topic does not exist"
			r.add(c)
			continue
		}
		var parts, fixes []string
		for _, g := range gs {
			p := fmt.Sprintf("%s %s", g.Need.Op, g.Verdict)
			if g.How != "" {
				p += " (" + g.How + ")"
			}
			if g.Verdict != brokercheck.Allowed && g.Note != "" {
				p += ": " + g.Note
			}
			parts = append(parts, p)
			switch g.Verdict {
			case brokercheck.Denied:
				c.Status = Fail
				fixes = append(fixes, g.Fix)
			case brokercheck.Unknown:
				if c.Status == OK {
					c.Status = Warn
				}
				fixes = append(fixes, "if missing: "+g.Fix)
			}
		}
		c.Detail = fmt.Sprintf("%s %q: %s", k.resource, k.name, strings.Join(parts, "; "))
		c.Fix = strings.Join(fixes, "; ")
		r.add(c)
	}
}

// limitCheck judges one written topic's max.message.bytes.
func limitCheck(pf *worker.Preflight, l worker.PreflightLimit) Check {
	c := Check{Name: "max.message.bytes", Subject: l.Setting + " " + l.Topic, Status: OK}
	in := "unknown"
	if pf.Input > 0 {
		in = fmt.Sprint(pf.Input)
	}
	if l.Err != nil {
		c.Status = Warn
		c.Detail = fmt.Sprintf("cannot be read (%v): the worker assumes --max-batch-bytes %s fits", l.Err, quantity.Size(uint64(pf.MaxBatchBytes)))
		c.Fix = "grant DescribeConfigs on the topic, or keep --max-batch-bytes at most its max.message.bytes less 125 bytes"
		return c
	}
	c.Detail = fmt.Sprintf("%d, --input's %s; records up to %d bytes (a batch of the record alone, as the broker counts it) are written to it", l.MaxMessageBytes, in, l.Bound)
	if l.Fits {
		return c
	}
	larger := fmt.Sprintf("a record over %d bytes, which --input takes, ", l.Bound)
	if pf.Input == 0 {
		larger = fmt.Sprintf("a record over %d bytes (below --max-batch-bytes %s) ", l.Bound, quantity.Size(uint64(pf.MaxBatchBytes)))
	}
	raise := fmt.Sprintf("raise the topic's max.message.bytes to at least %s's (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config max.message.bytes=N)",
		"the input", l.Topic)
	if pf.Input == 0 {
		raise = fmt.Sprintf("raise the topic's max.message.bytes to at least --max-batch-bytes (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config max.message.bytes=N)", l.Topic)
	}
	if l.MaxMessageBytes >= pf.Input && pf.Input > 0 {
		raise = fmt.Sprintf("raise --max-batch-bytes to at least %s", quantity.Size(uint64(pf.Input)))
	}
	switch l.Policy {
	case "":
		c.Status = Warn
		c.Detail += "; " + larger + "is dead-lettered as a reference record"
		c.Fix = raise
	case worker.UnwritableStall:
		c.Status = Fail
		c.Detail += "; " + larger + "stalls its partition (--on-unwritable stall)"
		c.Fix = raise + ", or set --dead-letter"
	default:
		c.Status = Warn
		c.Detail += fmt.Sprintf("; %sis unwritable: --on-unwritable %s", larger, l.Policy)
		c.Fix = raise
	}
	return c
}
