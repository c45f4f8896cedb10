package repartition

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/bloomgate/bloomgate/internal/kafkatest"
	"github.com/bloomgate/bloomgate/internal/keys"
)

// TestForeignMemberInHopGroup: a consumer that is not a hop joins the
// hop's group (kcat -G with its group id): the hop, leading, gives it
// nothing, and every input record still goes through the hop.
func TestForeignMemberInHopGroup(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(4, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	produce := func(from, n int) {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, &kgo.Record{Partition: int32(i % 4), Value: fmt.Appendf(nil, `{"url":"http://example.com/%d"}`, i)})
		}
		if err := pr.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ex, err := keys.NewExtractor("json:url", "url", 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Brokers: brokers, Group: "g-repartition", Input: "in", Output: "g-repartition"}, ex, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	adm := kadm.NewClient(pr)
	written := func() int64 {
		ends, err := adm.ListEndOffsets(ctx, "g-repartition")
		if err != nil {
			return -1
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	produce(0, 100)
	kafkatest.WaitFor(t, time.Minute, "the hop writing the first 100 records", func() bool { return written() >= 100 })
	var got atomic.Int64
	peek, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("peek"), kgo.ConsumerGroup("g-repartition"),
		kgo.ConsumeTopics("in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer peek.Close()
	pctx, pstop := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pctx.Err() == nil {
			got.Add(int64(peek.PollFetches(pctx).NumRecords()))
		}
	}()
	kafkatest.WaitFor(t, time.Minute, "the foreign member in the stable group", func() bool {
		g, err := adm.DescribeGroups(ctx, "g-repartition")
		return err == nil && g["g-repartition"].State == "Stable" && len(g["g-repartition"].Members) == 2
	})
	produce(100, 100)
	kafkatest.WaitFor(t, time.Minute, "the hop writing 200 records", func() bool { return written() >= 200 })
	pstop()
	<-polled
	if n := got.Load(); n != 0 {
		t.Errorf("the foreign member consumed %d records of the hop's input", n)
	}
}
