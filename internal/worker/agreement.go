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

	"github.com/segmentio/kafka-go"

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
// BloomgateGroupSettingsConflict. Members that announce nothing (older
// builds) are taken to agree.

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

// admit returns the members whose settings agree with this worker's, for
// the leader's assignment (group.Config.Admit), and reports the others.
func (w *Worker) admit(members []group.MemberInfo) []group.MemberInfo {
	mine := w.agreedSettings()
	out := make([]group.MemberInfo, 0, len(members))
	var conflicts []conflict
	for _, m := range members {
		theirs, ok := decodeSettings(m.UserData)
		if d := differences(mine, theirs); ok && len(d) > 0 {
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
// generation and reports the members whose settings differ from its own.
func (w *Worker) checkAgreement(ctx context.Context, self string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := w.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{w.cfg.Group}})
	if err != nil || len(res.Groups) != 1 || res.Groups[0].Error != nil {
		if err == nil && len(res.Groups) == 1 {
			err = res.Groups[0].Error
		}
		w.log.Debug("reading the group's members to compare settings failed", "err", err)
		return
	}
	mine := w.agreedSettings()
	var conflicts []conflict
	for _, m := range res.Groups[0].Members {
		if m.MemberID == self {
			continue
		}
		theirs, ok := decodeSettings(m.MemberMetadata.UserData)
		if d := differences(mine, theirs); ok && len(d) > 0 {
			conflicts = append(conflicts, conflict{Member: m.MemberID, Host: m.ClientHost, Diffs: d})
		}
	}
	w.m.settingsConflicts.Set(float64(len(conflicts)))
	w.mu.Lock()
	w.status.SettingsConflicts = conflicts
	w.mu.Unlock()
	for _, c := range conflicts {
		if _, seen := w.reported.LoadOrStore("member\x00"+c.key(), true); seen {
			continue
		}
		w.log.Error(fmt.Sprintf("group %s: member %s (%s) runs with other settings than this worker (%s): members of one group must agree "+
			"on the filter, key and output settings, and the group leader assigns partitions only to the members that agree with it",
			w.cfg.Group, c.Member, c.Host, strings.Join(c.Diffs, "; ")), "member", c.Member)
	}
}
