package dlock

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/redistest"
)

// BenchmarkBatchedRuns is what Redis spends on one lease's renewal and on
// one queued waiter's heartbeat, sent alone (in pipelines, one script run
// each) and in batches (a hundred to a run, see merge), beside what a
// waiter's heartbeat was before it had a script of its own: its try
// (queue_acquire.lua, joining the queue it is in). One op sends the calls
// of 1,000 leases or waiters; redis-µs/call is Redis' time (INFO
// commandstats) per call; with DLOCK_BENCH_CALLGRIND=1, redis-instr/call
// is the instructions Redis ran per call (see redistest.StartCounted).
//
//	go test -run '^$' -bench BatchedRuns -benchtime 20x .
func BenchmarkBatchedRuns(b *testing.B) {
	const n = 1000
	srv := redistest.StartBench(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	renewals, tries, beats := heldAndWaiting(b, srv, "bench", n)
	alone := func(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
		var cmds []*redis.Cmd
		for i := 0; i < len(calls); i += mergeMax {
			cmds = append(cmds, sendEach(ctx, rdb, calls[i:min(i+mergeMax, len(calls))])...)
		}
		return cmds
	}
	for _, bc := range []struct {
		name  string
		calls []scriptCall
		send  func(context.Context, redis.UniversalClient, []scriptCall) []*redis.Cmd
	}{
		{"renewal/alone", renewals, alone},
		{"renewal/batched", renewals, sendAll},
		{"heartbeat/try", tries, alone},
		{"heartbeat/alone", beats, alone},
		{"heartbeat/batched", beats, sendAll},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for _, cmd := range bc.send(ctx, rdb, bc.calls) { // loads the scripts
				if err := cmd.Err(); err != nil {
					b.Fatal(err)
				}
			}
			usec := redistest.CommandMicros(b, rdb, "evalsha")
			if srv.Counted() {
				srv.Instructions(b)
			}
			ops := 0
			for b.Loop() {
				bc.send(ctx, rdb, bc.calls)
				ops++
			}
			if srv.Counted() {
				b.ReportMetric(float64(srv.Instructions(b))/float64(ops*n), "redis-instr/call")
			}
			b.ReportMetric(float64(redistest.CommandMicros(b, rdb, "evalsha")-usec)/float64(ops*n), "redis-µs/call")
		})
	}
}
