package worker

import (
	"errors"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
)

func TestSummarizeWriteErrors(t *testing.T) {
	we := make(kafka.WriteErrors, 5000)
	for i := range we {
		switch {
		case i%2 == 0:
			we[i] = kafka.MessageSizeTooLarge
		case i%5 == 0:
			we[i] = kafka.NotLeaderForPartition
		}
	}
	err := summarizeWriteErrors(we)
	msg := err.Error()
	if len(msg) > 400 {
		t.Fatalf("summary is %d bytes long: %.200s…", len(msg), msg)
	}
	for _, want := range []string{"3000 of 5000 messages failed", "2500×", "500×"} {
		if !strings.Contains(msg, want) {
			t.Errorf("summary %q lacks %q", msg, want)
		}
	}
	var got kafka.WriteErrors
	if !errors.As(err, &got) || len(got) != 5000 {
		t.Fatal("the summary hides the original kafka.WriteErrors from errors.As")
	}
	if !errors.Is(err, kafka.MessageSizeTooLarge) {
		t.Fatal("errors.Is does not reach the broker error through the summary")
	}
	plain := errors.New("connection refused")
	if summarizeWriteErrors(plain) != plain {
		t.Fatal("a non-WriteErrors error was changed")
	}
}
