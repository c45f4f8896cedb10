package producer

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/segmentio/kafka-go"
)

// MaxMessageBytes reads the effective max.message.bytes of topics (a
// broker default counts) with one DescribeConfigs request: the largest
// batch (Batch.Size) each topic takes. A topic whose value cannot be read
// (DescribeConfigs refused by ACLs, unsupported, not a number) is left out
// of the result, with the reason in errs.
func MaxMessageBytes(ctx context.Context, client *kafka.Client, topics []string) (map[string]int64, map[string]error) {
	errs := map[string]error{}
	req := &kafka.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{"max.message.bytes"}})
	}
	res, err := client.DescribeConfigs(ctx, req)
	if err != nil {
		for _, t := range topics {
			errs[t] = err
		}
		return nil, errs
	}
	out := map[string]int64{}
	for _, r := range res.Resources {
		if r.Error != nil {
			errs[r.ResourceName] = r.Error
			continue
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != "max.message.bytes" {
				continue
			}
			v, err := strconv.ParseInt(e.ConfigValue, 10, 64)
			if err != nil || v <= 0 {
				errs[r.ResourceName] = fmt.Errorf("max.message.bytes %q is not a positive number", e.ConfigValue)
				break
			}
			out[r.ResourceName] = v
		}
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok && errs[t] == nil {
			errs[t] = errors.New("max.message.bytes missing from the answer")
		}
	}
	return out, errs
}
