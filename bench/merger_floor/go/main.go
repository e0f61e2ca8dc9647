// The floor of a merger in Go over franz-go: read two replica topics from their start,
// forward the first copy of each result id to the sink, drop the second. No merge logic
// beyond a set of ids; see bench/merger_cpu.py (the floor-go variant).
//
//	forward BOOTSTRAP SINK TOPIC0 TOPIC1 PARTITIONS SECONDS
//
// Settings as close to arfl's merger as franz-go allows (its shortest fetch wait is 10 ms;
// the broker answers at once when data is there). Prints "results N duplicates M".
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: forward BOOTSTRAP SINK TOPIC0 TOPIC1 PARTITIONS SECONDS")
		os.Exit(2)
	}
	bootstrap, sink := os.Args[1], os.Args[2]
	partitions, _ := strconv.Atoi(os.Args[5])
	seconds, _ := strconv.ParseFloat(os.Args[6], 64)
	offsets := map[string]map[int32]kgo.Offset{}
	for _, topic := range os.Args[3:5] {
		offsets[topic] = map[int32]kgo.Offset{}
		for p := 0; p < partitions; p++ {
			offsets[topic][int32(p)] = kgo.NewOffset().AtStart()
		}
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ConsumePartitions(offsets),
		kgo.FetchMaxWait(10*time.Millisecond), kgo.FetchMinBytes(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.ProducerLinger(time.Millisecond),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds*float64(time.Second)))
	defer cancel()
	field := []byte(`"rid":"`)
	seen := map[string]struct{}{}
	results, duplicates := 0, 0
	for ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			i := bytes.Index(r.Value, field)
			if i < 0 {
				return
			}
			rest := r.Value[i+len(field):]
			j := bytes.IndexByte(rest, '"')
			if j < 0 {
				return
			}
			rid := string(rest[:j])
			if _, ok := seen[rid]; ok {
				duplicates++
				return
			}
			seen[rid] = struct{}{}
			results++
			producer.Produce(ctx, &kgo.Record{Topic: sink, Partition: r.Partition, Key: r.Key, Value: r.Value}, nil)
		})
	}
	if err := producer.Flush(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	fmt.Printf("results %d duplicates %d\n", results, duplicates)
}
