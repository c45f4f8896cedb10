package config

import (
	"strings"
	"testing"
	"time"
)

func TestParsePosition(t *testing.T) {
	at := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	cases := []struct {
		in      string
		want    Position
		wantErr string
	}{
		{in: "earliest", want: Position{}},
		{in: "LATEST", want: Position{Latest: true}},
		{in: "2026-11-24T08:00:00Z", want: Position{At: at}},
		{in: "72h", want: Position{Ago: 72 * time.Hour}},
		{in: "90m", want: Position{Ago: 90 * time.Minute}},
		{in: "3d", want: Position{Ago: 72 * time.Hour}},
		{in: "2w", want: Position{Ago: 14 * 24 * time.Hour}},
		{in: "-1h", wantErr: "must be positive"},
		{in: "yesterday", wantErr: "RFC 3339"},
		{in: "2026-11-24", wantErr: "RFC 3339"},
	}
	for _, tc := range cases {
		got, err := ParsePosition(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePosition(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !got.At.Equal(tc.want.At) || got.Latest != tc.want.Latest || got.Ago != tc.want.Ago {
			t.Errorf("ParsePosition(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestStartAndSeedValidation(t *testing.T) {
	cases := []struct {
		start, seed string
		wantErr     string // setting named in the error; "" for valid
	}{
		{start: "earliest"},
		{start: "latest", seed: "72h"},
		{start: "24h", seed: "72h"},
		{start: "latest", seed: "earliest"},
		{start: "2026-11-24T08:00:00Z", seed: "2026-11-20T08:00:00Z"},
		{start: "soon", wantErr: "--start-from"},
		{start: "earliest", seed: "72h", wantErr: "--seed-from"},
		{start: "latest", seed: "latest", wantErr: "--seed-from"},
		{start: "72h", seed: "24h", wantErr: "--seed-from"},
		{start: "2026-11-20T08:00:00Z", seed: "2026-11-24T08:00:00Z", wantErr: "--seed-from"},
	}
	for _, tc := range cases {
		c := Default()
		c.Brokers, c.Input, c.Output = []string{"127.0.0.1:9092"}, "in", "out"
		c.StartFrom, c.SeedFrom = tc.start, tc.seed
		err := c.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("start %q seed %q: %v", tc.start, tc.seed, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("start %q seed %q: error %v, want one naming %s", tc.start, tc.seed, err, tc.wantErr)
		}
	}
}

func TestSeedTopicValidation(t *testing.T) {
	cases := []struct {
		name              string
		topic, key, start string
		seed              string
		repartition       bool
		wantErr           string // setting named in the error; "" for valid
	}{
		{name: "topic alone", topic: "old-unique", start: "earliest"},
		{name: "topic, own key", topic: "old-unique", key: "header:order-id", start: "earliest"},
		{name: "topic bounded by seed-from, forward all", topic: "old-unique", start: "earliest", seed: "72h"},
		{name: "the output itself", topic: "out", start: "latest"},
		{name: "the input", topic: "in", wantErr: "--seed-topic"},
		{name: "bad name", topic: "a b", wantErr: "--seed-topic"},
		{name: "with repartition", topic: "old-unique", repartition: true, wantErr: "--seed-topic"},
		{name: "key without topic", key: "key", wantErr: "--seed-key"},
		{name: "bad key", topic: "old-unique", key: "xml:id", wantErr: "--seed-key"},
	}
	for _, tc := range cases {
		c := Default()
		c.Brokers, c.Input, c.Output = []string{"127.0.0.1:9092"}, "in", "out"
		c.SeedTopic, c.SeedKey, c.SeedFrom, c.Repartition = tc.topic, tc.key, tc.seed, tc.repartition
		if tc.start != "" {
			c.StartFrom = tc.start
		}
		err := c.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.wantErr)
		}
	}
}
