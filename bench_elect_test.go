package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// BenchmarkElectionTerms runs 4 campaigners, each on a client of its own
// (a replica), that campaign, lead for 1ms and resign, while a fifth
// client runs 0 or 4 observers. terms/s is the throughput; gap-µs the mean
// time from a Resign's start to the next leader's Campaign returning (the
// hand-over); rt/term every command the campaigners sent per term (tries,
// heartbeats, renewals, resigns); obs-rt/term the commands the observers'
// client sent per term (its reads); seen/term the states one observer
// received per term; redis-µs/term what Redis spent on all of it.
func BenchmarkElectionTerms(b *testing.B) {
	for _, observers := range []int{0, 4} {
		b.Run(fmt.Sprintf("observers=%d", observers), func(b *testing.B) { benchElection(b, observers) })
	}
}

func benchElection(b *testing.B, observers int) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	ctx := context.Background()
	const campaigners = 4
	var hooks []*hook
	var elections []*dlock.Election
	for range campaigners {
		c, _, cnt := newClient(b, srv)
		hooks = append(hooks, cnt)
		elections = append(elections, c.Election("bench-elect"))
	}
	for _, e := range elections { // warm the scripts and connections
		l, err := e.Campaign(ctx, "warm")
		if err != nil {
			b.Fatal(err)
		}
		l.Resign(ctx)
	}
	oc, _, ocnt := newClient(b, srv)
	octx, stop := context.WithCancel(ctx)
	var seen atomic.Int64
	var owg sync.WaitGroup
	for i := range observers {
		ch := oc.Election("bench-elect").Observe(octx)
		owg.Add(1)
		go func() {
			defer owg.Done()
			for range ch {
				if i == 0 {
					seen.Add(1)
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // the observers are subscribed
	sent := func() (n int64) {
		for _, h := range hooks {
			n += h.Load()
		}
		return n
	}
	var (
		left, gaps, gapN atomic.Int64
		resigned         atomic.Int64 // UnixNano of the last Resign's start
		failed           atomic.Value
		wg               sync.WaitGroup
	)
	left.Store(int64(b.N))
	before, obsBefore, seenBefore, usec := sent(), ocnt.Load(), seen.Load(), commandMicros(b, admin)
	b.ResetTimer()
	for _, e := range elections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				l, err := e.Campaign(ctx, "replica")
				if err != nil {
					failed.Store(err)
					return
				}
				if r := resigned.Load(); r != 0 {
					gaps.Add(time.Now().UnixNano() - r)
					gapN.Add(1)
				}
				time.Sleep(time.Millisecond)
				resigned.Store(time.Now().UnixNano())
				if err := l.Resign(ctx); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	time.Sleep(50 * time.Millisecond) // the observers' last reads
	stop()
	owg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "terms/s")
	if gapN.Load() > 0 {
		b.ReportMetric(float64(gaps.Load())/float64(gapN.Load())/1000, "gap-µs")
	}
	b.ReportMetric(float64(sent()-before)/n, "rt/term")
	if observers > 0 {
		b.ReportMetric(float64(ocnt.Load()-obsBefore)/n, "obs-rt/term")
		b.ReportMetric(float64(seen.Load()-seenBefore)/n, "seen/term")
	}
	b.ReportMetric(float64(commandMicros(b, admin)-usec)/n, "redis-µs/term")
}
