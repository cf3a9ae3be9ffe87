package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// BenchmarkSemaphoreContended runs clients×goroutines workers on one
// Semaphore of size 2, each taking 1 permit: hold it 2ms, release, step
// away 1ms, as the bench module's contention scenarios do. clients stand
// for machines (a dlock client each). acq/s is the throughput (the ideal,
// two permits always held for 2ms, is 1,000/s); rt/acq every command all
// clients sent per acquisition (tries, heartbeats, renewals, releases);
// redis-µs/acq what Redis spent on them; wait-max-ms the longest Acquire;
// jain the fairness of acquisitions across workers (1: equal).
func BenchmarkSemaphoreContended(b *testing.B) {
	for _, shape := range [][2]int{{1, 8}, {4, 8}} {
		b.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(b *testing.B) {
			benchSemaphore(b, shape[0], shape[1])
		})
	}
}

func benchSemaphore(b *testing.B, clients, goroutines int) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	ctx := context.Background()
	var hooks []*hook
	var sems []*dlock.Semaphore
	for range clients {
		c, _, cnt := newClient(b, srv)
		hooks = append(hooks, cnt)
		sems = append(sems, c.Semaphore("bench-sem", 2))
	}
	// Warm the script cache and the connections.
	for _, s := range sems {
		l, err := s.Acquire(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		l.Unlock(ctx)
	}
	sent := func() (n int64) {
		for _, h := range hooks {
			n += h.Load()
		}
		return n
	}
	workers := clients * goroutines
	counts := make([]int64, workers)
	var (
		mu     sync.Mutex
		waits  []time.Duration
		left   atomic.Int64
		failed atomic.Value
		wg     sync.WaitGroup
	)
	left.Store(int64(b.N))
	before, usec := sent(), commandMicros(b, admin)
	b.ResetTimer()
	for i := range workers {
		s := sems[i%clients]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				t := time.Now()
				l, err := s.Acquire(ctx, 1)
				if err != nil {
					failed.Store(err)
					return
				}
				w := time.Since(t)
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
				counts[i]++
				time.Sleep(2 * time.Millisecond)
				if err := l.Unlock(ctx); err != nil {
					failed.Store(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acq/s")
	b.ReportMetric(float64(sent()-before)/float64(b.N), "rt/acq")
	b.ReportMetric(float64(commandMicros(b, admin)-usec)/float64(b.N), "redis-µs/acq")
	b.ReportMetric(float64(slices.Max(waits).Microseconds())/1000, "wait-max-ms")
	b.ReportMetric(jain(counts), "jain")
}

// jain is Jain's fairness index of the counts: 1 when all are equal, 1/n
// when one worker had everything.
func jain(counts []int64) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * sq)
}
