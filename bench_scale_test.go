package dlock_test

import (
	"context"
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
// and the time Redis spent on them (INFO commandstats, every master),
// (round trips per shard: on the Cluster, counted on each master's
// connection), and per lease the goroutines and heap holding takes. Run it once:
//
//	go test -run '^$' -bench HoldMany -benchtime 1x -timeout 20m .
func BenchmarkHoldMany(b *testing.B) {
	n, hold := envInt(b, "DLOCK_BENCH_LEASES", 10_000), time.Duration(envInt(b, "DLOCK_BENCH_HOLD", 20))*time.Second
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		rdb, trips := srv.Client(b), &hook{}
		rdb.AddHook(trips)
		benchHoldMany(b, rdb, trips, []*redistest.Server{srv}, n, hold)
	})
	b.Run("cluster", func(b *testing.B) {
		cl := redistest.StartCluster(b)
		// A Cluster pipeline is a round trip to each master it reaches:
		// count them on the node clients.
		rdb, trips := cl.Client(b), &hook{}
		rdb.OnNewNode(func(node *redis.Client) { node.AddHook(trips) })
		benchHoldMany(b, rdb, trips, cl.Masters(b), n, hold)
	})
}

// benchHoldMany holds n leases on rdb for hold; cnt counts its round
// trips and commands, masters are the servers whose time is counted.
func benchHoldMany(b *testing.B, rdb redis.UniversalClient, cnt *hook, masters []*redistest.Server, n int, hold time.Duration) {
	c := dlock.New(rdb)
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
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
		trips, cmds, usec, t0 := cnt.trips.Load(), cnt.Load(), redisMicros(b, masters), time.Now()
		time.Sleep(hold)
		secs := time.Since(t0).Seconds()
		b.ReportMetric(float64(cnt.trips.Load()-trips)/secs/float64(len(masters)), "rt/s/shard")
		b.ReportMetric(float64(cnt.Load()-cmds)/secs, "cmds/s")
		b.ReportMetric(float64(redisMicros(b, masters)-usec)/secs, "redis-µs/s")
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

// redisMicros sums the time every server spent on scripts (EVALSHA), in
// µs, from INFO commandstats.
func redisMicros(b *testing.B, servers []*redistest.Server) (total int64) {
	for _, s := range servers {
		total += commandMicros(b, s.Client(b))
	}
	return total
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
