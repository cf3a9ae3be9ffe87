package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// BenchmarkHoldMany is what holding many leases costs: one client holds
// DLOCK_BENCH_LEASES Mutex leases (default 10,000; TTL 10s) for
// DLOCK_BENCH_HOLD (default 20s), on one Redis and on a 3-master Cluster,
// and reports per second of holding the round trips and commands it sent
// (round trips per shard: on the Cluster, counted on each master's
// connection), the time Redis spent running them (redis-µs/s: INFO
// commandstats, every master) and the CPU the servers used beyond what
// they use idle (redis-cpu-µs/s: INFO cpu, which also counts reading the
// requests and writing the replies, and not a wait for a CPU that
// commandstats counts when more processes than cores are busy; idle read
// over 3 s before), and per lease the goroutines and heap holding takes.
// Run it once:
//
//	go test -run '^$' -bench HoldMany -benchtime 1x -timeout 20m .
func BenchmarkHoldMany(b *testing.B) {
	n, hold := envInt(b, "DLOCK_BENCH_LEASES", 10_000), time.Duration(envInt(b, "DLOCK_BENCH_HOLD", 20))*time.Second
	onEachDeployment(b, func(b *testing.B, rdb, _ redis.UniversalClient, cnt *hook, masters []*redistest.Server) {
		benchHoldMany(b, rdb, cnt, masters, n, hold)
	})
}

// onEachDeployment runs bench on one Redis and on a 3-master Cluster, with
// a client whose round trips and commands cnt counts, a second client
// that is not counted, and the masters whose time is counted.
func onEachDeployment(b *testing.B, bench func(b *testing.B, rdb, other redis.UniversalClient, cnt *hook, masters []*redistest.Server)) {
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		rdb, cnt := srv.Client(b), &hook{}
		rdb.AddHook(cnt)
		bench(b, rdb, srv.Client(b), cnt, []*redistest.Server{srv})
	})
	b.Run("cluster", func(b *testing.B) {
		cl := redistest.StartCluster(b)
		// A Cluster pipeline is a round trip to each master it reaches:
		// count them on the node clients.
		rdb, cnt := cl.Client(b), &hook{}
		rdb.OnNewNode(func(node *redis.Client) { node.AddHook(cnt) })
		bench(b, rdb, cl.Client(b), cnt, cl.Masters(b))
	})
}

// benchHoldMany holds n leases on rdb for hold; cnt counts its round
// trips and commands, masters are the servers whose time is counted.
func benchHoldMany(b *testing.B, rdb redis.UniversalClient, cnt *hook, masters []*redistest.Server, n int, hold time.Duration) {
	c := dlock.New(rdb)
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
		idle := idleCPU(b, masters)
		leases := make([]*dlock.Lease, n)
		var mem0, mem1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&mem0)
		g0 := runtime.NumGoroutine()
		var failed atomic.Value
		parallel(n, func(i int) {
			l, err := c.Mutex(fmt.Sprintf("hold/%d", i)).TryLock(ctx)
			if err != nil {
				failed.Store(err)
			}
			leases[i] = l
		})
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		time.Sleep(5 * time.Second) // the first renewals load the script
		trips, cmds, usec, cpu, t0 := cnt.trips.Load(), cnt.Load(), redisMicros(b, masters), redisCPU(b, masters), time.Now()
		time.Sleep(hold)
		secs := time.Since(t0).Seconds()
		b.ReportMetric(float64(cnt.trips.Load()-trips)/secs/float64(len(masters)), "rt/s/shard")
		b.ReportMetric(float64(cnt.Load()-cmds)/secs, "cmds/s")
		b.ReportMetric(float64(redisMicros(b, masters)-usec)/secs, "redis-µs/s")
		b.ReportMetric(float64(redisCPU(b, masters)-cpu)/secs-idle, "redis-cpu-µs/s")
		b.ReportMetric(idle, "redis-idle-cpu-µs/s")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/float64(n), "goroutines/lease")
		runtime.GC()
		runtime.ReadMemStats(&mem1)
		b.ReportMetric(float64(int64(mem1.HeapInuse)-int64(mem0.HeapInuse))/1024/float64(n), "heap-KiB/lease")
		for _, l := range leases {
			select {
			case <-l.Lost():
				b.Fatalf("%s lost while held", l.Name())
			default:
			}
		}
		parallel(n, func(i int) { _ = leases[i].Unlock(ctx) })
	}
}

// BenchmarkWaitMany is what waiting in many places costs: one client
// blocks DLOCK_BENCH_LEASES waiters (default 10,000), each in Lock on a
// Mutex of its own that another client holds (with no TTL, so that only
// the waiters cost anything), for DLOCK_BENCH_HOLD (default 20s), on one
// Redis and on a 3-master Cluster. It reports what BenchmarkHoldMany does,
// per waiter: round trips and commands per second, Redis time and CPU
// per second, and the goroutines (beyond the waiter's own) and heap that waiting
// takes. Run it once:
//
//	go test -run '^$' -bench WaitMany -benchtime 1x -timeout 20m .
func BenchmarkWaitMany(b *testing.B) {
	n, hold := envInt(b, "DLOCK_BENCH_LEASES", 10_000), time.Duration(envInt(b, "DLOCK_BENCH_HOLD", 20))*time.Second
	onEachDeployment(b, func(b *testing.B, rdb, holders redis.UniversalClient, cnt *hook, masters []*redistest.Server) {
		benchWaitMany(b, rdb, holders, cnt, masters, n, hold)
	})
}

// benchWaitMany blocks n waiters on rdb for hold, on locks held through
// holders; cnt counts the waiters' round trips and commands, masters are
// the servers whose time is counted.
func benchWaitMany(b *testing.B, rdb, holders redis.UniversalClient, cnt *hook, masters []*redistest.Server, n int, hold time.Duration) {
	c, hc := dlock.New(rdb), dlock.New(holders)
	defer c.Close()
	defer hc.Close()
	ctx := context.Background()
	for b.Loop() {
		idle := idleCPU(b, masters)
		held := make([]*dlock.Lease, n)
		var failed atomic.Value
		parallel(n, func(i int) {
			l, err := hc.Mutex(fmt.Sprintf("wait/%d", i), dlock.WithNoExpiry()).TryLock(ctx)
			if err != nil {
				failed.Store(err)
			}
			held[i] = l
		})
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		var mem0, mem1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&mem0)
		g0 := runtime.NumGoroutine()
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, n)
		for i := range n {
			go func() {
				_, err := c.Mutex(fmt.Sprintf("wait/%d", i)).Lock(wctx)
				done <- err
			}()
		}
		time.Sleep(5 * time.Second) // every waiter queued
		trips, cmds, usec, cpu, t0 := cnt.trips.Load(), cnt.Load(), redisMicros(b, masters), redisCPU(b, masters), time.Now()
		time.Sleep(hold)
		secs := time.Since(t0).Seconds()
		b.ReportMetric(float64(cnt.trips.Load()-trips)/secs/float64(len(masters)), "rt/s/shard")
		b.ReportMetric(float64(cnt.Load()-cmds)/secs, "cmds/s")
		b.ReportMetric(float64(redisMicros(b, masters)-usec)/secs/float64(n), "redis-µs/waiter-s")
		b.ReportMetric((float64(redisCPU(b, masters)-cpu)/secs-idle)/float64(n), "redis-cpu-µs/waiter-s")
		b.ReportMetric(idle, "redis-idle-cpu-µs/s")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0-n)/float64(n), "goroutines/waiter")
		runtime.GC()
		runtime.ReadMemStats(&mem1)
		b.ReportMetric(float64(int64(mem1.HeapInuse)-int64(mem0.HeapInuse))/1024/float64(n), "heap-KiB/waiter")
		cancel()
		for range n {
			if err := <-done; !errors.Is(err, context.Canceled) {
				b.Fatalf("a waiter ended with %v, want the cancellation", err)
			}
		}
		parallel(n, func(i int) { _ = held[i].Unlock(ctx) })
	}
}

// redisMicros sums the time every server spent on scripts (EVALSHA), in
// µs, from INFO commandstats.
func redisMicros(b *testing.B, servers []*redistest.Server) (total int64) {
	for _, s := range servers {
		total += commandMicros(b, s.Client(b))
	}
	return total
}

// redisCPU sums the CPU time every server has used, in µs (see
// redistest.CPUMicros).
func redisCPU(b *testing.B, servers []*redistest.Server) (total int64) {
	for _, s := range servers {
		total += redistest.CPUMicros(b, s.Client(b))
	}
	return total
}

// idleCPU is the CPU time, in µs per second, the servers use on their own
// (their timers; on a Cluster, the nodes' gossip), read over 3 s in
// which nothing is sent to them, so that it can be told from the work a
// benchmark sends.
func idleCPU(b *testing.B, servers []*redistest.Server) float64 {
	cpu, t0 := redisCPU(b, servers), time.Now()
	time.Sleep(3 * time.Second)
	return float64(redisCPU(b, servers)-cpu) / time.Since(t0).Seconds()
}

// envInt reads a positive integer setting from the environment, or def.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// parallel runs f(0..n-1) on 32 goroutines.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	done := make(chan struct{})
	for range 32 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		}()
	}
	for range 32 {
		<-done
	}
}
