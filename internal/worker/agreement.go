package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/group"
)

// Members of one group must agree on the settings that decide what a
// partition's memory holds and where its records go: the filter plan, the
// key, the isolation level, the written topics and policies. A member
// with other settings would judge its partitions differently (a member
// with --window 1h among --window 24h ones forwards repeats the others
// catch), and partitions moving between members would flap the plan of
// their memories.
//
// Each member announces its settings in the user data of its group
// protocol metadata (agreedSettings). The leader assigns partitions only
// to members that agree with it; a member that disagrees gets none and
// stays idle (ready, so that a rolling restart that changes settings goes
// on: the new members take over once the last old one, and with it the
// old leader, is gone). Every member reads the group's members after it
// joins a generation (DescribeGroups) and reports each disagreement: an
// ERROR naming the setting and both values, the gauge
// bloomgate_group_settings_conflicts, the status page, and the alert
// BloomgateGroupSettingsConflict. A member that announces nothing is not
// a bloomgate worker (kcat, a console consumer: foreignMember): it gets no
// partitions from a bloomgate leader, and every member reports it, with
// what it holds when it leads (bloomgate_group_foreign_members, the
// status page, BloomgateForeignGroupMember).

// Setting is one setting that members of a group must agree on, by its
// flag name.
type Setting struct {
	Name, Value string
}

// agreementVersion versions the user data; members compare the settings
// both name, so a setting added later does not count as a disagreement
// with members that do not announce it.
const agreementVersion = 1

type settingsData struct {
	V int         `json:"v"`
	S [][2]string `json:"s"`
}

// agreedSettings lists this worker's settings that members must agree on,
// sorted by name: the worker's own and Config.Agreement.
func (w *Worker) agreedSettings() []Setting {
	c := w.cfg
	s := []Setting{
		{"window", c.Filter.Window.String()},
		{"generations", strconv.Itoa(c.Filter.Generations)},
		{"capacity", strconv.FormatUint(c.Filter.Capacity, 10)},
		{"fpr", strconv.FormatFloat(c.Filter.FPR, 'g', -1, 64)},
		{"isolation-level", string(c.IsolationLevel)},
		{"partitioning", string(c.Partitioning)},
		{"output", c.Output},
		{"duplicates", c.Duplicates},
		{"dead-letter", c.DeadLetter},
		{"on-missing-key", string(c.OnMissingKey)},
	}
	s = append(s, c.Agreement...)
	slices.SortFunc(s, func(a, b Setting) int { return cmp.Compare(a.Name, b.Name) })
	return s
}

func encodeSettings(s []Setting) []byte {
	d := settingsData{V: agreementVersion}
	for _, x := range s {
		d.S = append(d.S, [2]string{x.Name, x.Value})
	}
	b, _ := json.Marshal(d)
	return b
}

// decodeSettings reads a member's user data; ok is false if it announces
// nothing this build can read.
func decodeSettings(b []byte) (s []Setting, ok bool) {
	var d settingsData
	if len(b) == 0 || json.Unmarshal(b, &d) != nil || d.V < 1 {
		return nil, false
	}
	for _, x := range d.S {
		s = append(s, Setting{x[0], x[1]})
	}
	return s, true
}

// differences says, for each setting both lists name with other values,
// "--name mine (this member) vs theirs".
func differences(mine, theirs []Setting) []string {
	other := map[string]string{}
	for _, s := range theirs {
		other[s.Name] = s.Value
	}
	var out []string
	for _, s := range mine {
		if v, ok := other[s.Name]; ok && v != s.Value {
			out = append(out, fmt.Sprintf("--%s %s here, %s there", s.Name, quoteEmpty(s.Value), quoteEmpty(v)))
		}
	}
	return out
}

func quoteEmpty(v string) string {
	if v == "" {
		return `""`
	}
	return v
}

// conflict is a member whose settings differ from this worker's.
type conflict struct {
	Member string   `json:"member"`
	Host   string   `json:"host,omitempty"`
	Diffs  []string `json:"differences"`
}

func (c conflict) key() string { return c.Member + "\x00" + strings.Join(c.Diffs, "\x00") }

// foreignMember is a member of the group that announces no bloomgate
// settings: kcat, a console consumer, any other client (or a build from
// before the announcement). It gets no partitions from a bloomgate
// leader; what it holds when it leads is not deduplicated.
type foreignMember struct {
	Member   string `json:"member"`
	ClientID string `json:"client_id,omitempty"`
	Host     string `json:"host,omitempty"`
	Holds    []int  `json:"holds,omitempty"`
}

func (f foreignMember) key() string { return f.Member + "\x00" + fmt.Sprint(f.Holds) }

// admit returns the members whose settings agree with this worker's, for
// the leader's assignment (group.Config.Admit), and reports the others:
// those with other settings, and foreign members (no bloomgate settings
// announced), which get nothing either.
func (w *Worker) admit(members []group.MemberInfo) []group.MemberInfo {
	mine := w.agreedSettings()
	out := make([]group.MemberInfo, 0, len(members))
	var conflicts []conflict
	for _, m := range members {
		theirs, ok := decodeSettings(m.UserData)
		if !ok {
			if _, seen := w.reported.LoadOrStore("leader-foreign\x00"+m.ID, true); !seen {
				w.log.Error(fmt.Sprintf("group %s: member %s is not a bloomgate worker (it announces no bloomgate settings: kcat, a console "+
					"consumer or another client using the worker's group id); it gets no partitions from this member, the group leader. "+
					"Give other consumers their own group id", w.cfg.Group, m.ID), "member", m.ID)
			}
			continue
		}
		if d := differences(mine, theirs); len(d) > 0 {
			conflicts = append(conflicts, conflict{Member: m.ID, Diffs: d})
			continue
		}
		out = append(out, m)
	}
	for _, c := range conflicts {
		if _, seen := w.reported.LoadOrStore("leader\x00"+c.key(), true); seen {
			continue
		}
		w.log.Error(fmt.Sprintf("group %s: member %s runs with other settings than this member, the group leader (%s): "+
			"members of one group must agree on the filter, key and output settings; it gets no partitions until it runs with the same ones "+
			"(to change settings, restart every member with the new ones: members with the new settings take over once no member with the old ones is left)",
			w.cfg.Group, c.Member, strings.Join(c.Diffs, "; ")), "member", c.Member)
	}
	return out
}

// checkAgreement reads the group's members after this worker joined a
// generation (gen) and reports the members whose settings differ from its
// own, the foreign members and what they hold, and the partitions of the
// input no member that agrees with this one processes.
func (w *Worker) checkAgreement(ctx context.Context, gen group.Generation) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := w.member.Describe(ctx)
	if err != nil {
		w.log.Debug("reading the group's members to compare settings failed", "err", err)
		return
	}
	n, err := w.member.PartitionCount(ctx)
	if err != nil {
		w.log.Debug("reading the input's partition count failed", "err", err)
		return
	}
	mine := w.agreedSettings()
	var conflicts []conflict
	var foreign []foreignMember
	processed := make([]bool, n)
	for _, m := range d.Members {
		theirs, ok := decodeSettings(m.UserData)
		diffs := differences(mine, theirs)
		switch {
		case !ok:
			foreign = append(foreign, foreignMember{Member: m.ID, ClientID: m.ClientID, Host: m.Host, Holds: m.Assigned})
			continue
		case len(diffs) > 0 && m.ID != gen.MemberID:
			conflicts = append(conflicts, conflict{Member: m.ID, Host: m.Host, Diffs: diffs})
			continue
		}
		for _, p := range m.Assigned {
			if p >= 0 && p < n {
				processed[p] = true
			}
		}
	}
	var unprocessed []int
	if d.State == "Stable" {
		for p, ok := range processed {
			if !ok {
				unprocessed = append(unprocessed, p)
			}
		}
	}
	w.m.settingsConflicts.Set(float64(len(conflicts)))
	w.m.foreignMembers.Set(float64(len(foreign)))
	w.m.unprocessedPartitions.WithLabelValues(w.cfg.Input).Set(float64(len(unprocessed)))
	w.mu.Lock()
	w.status.SettingsConflicts = conflicts
	w.status.ForeignMembers = foreign
	w.status.Unprocessed = unprocessed
	w.mu.Unlock()
	for _, c := range conflicts {
		if _, seen := w.reported.LoadOrStore("member\x00"+c.key(), true); seen {
			continue
		}
		w.log.Error(fmt.Sprintf("group %s: member %s (%s) runs with other settings than this worker (%s): members of one group must agree "+
			"on the filter, key and output settings, and the group leader assigns partitions only to the members that agree with it",
			w.cfg.Group, c.Member, c.Host, strings.Join(c.Diffs, "; ")), "member", c.Member)
	}
	for _, f := range foreign {
		if _, seen := w.reported.LoadOrStore("foreign\x00"+f.key(), true); seen {
			continue
		}
		what := "it holds no partitions"
		if len(f.Holds) > 0 {
			what = fmt.Sprintf("it holds partitions %v of %s, whose records it consumes and commits without deduplication", f.Holds, w.cfg.Input)
		}
		w.log.Error(fmt.Sprintf("group %s: member %s (client id %q, host %s) is not a bloomgate worker: %s. "+
			"Another consumer uses the worker's group id (a kcat -G or console consumer started with it?): give it its own group id",
			w.cfg.Group, f.Member, f.ClientID, f.Host, what), "member", f.Member, "client_id", f.ClientID, "host", f.Host, "holds", f.Holds)
	}
	if len(unprocessed) > 0 {
		if _, seen := w.reported.LoadOrStore(fmt.Sprint("unprocessed\x00", gen.ID), true); !seen {
			w.log.Warn(fmt.Sprintf("group %s: no bloomgate worker that agrees with this one processes partitions %v of %s in generation %d",
				w.cfg.Group, unprocessed, w.cfg.Input, gen.ID), "partitions", unprocessed)
		}
	}
}
