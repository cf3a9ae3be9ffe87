package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// BenchmarkMutexTryLockUnlock is the uncontended path: one TryLock and one
// Unlock, two round trips.
func BenchmarkMutexTryLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	c, rdb, cnt := newClient(b, srv)
	b.Run("ctx=background", func(b *testing.B) {
		benchTryLockUnlock(b, context.Background(), leaseTry(c.Mutex("bench").TryLock), rdb, cnt)
	})
	// A ctx that can end costs a goroutine per call, which keeps the call
	// within the ctx deadline whatever go-redis' options.
	b.Run("ctx=cancellable", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		benchTryLockUnlock(b, ctx, leaseTry(c.Mutex("bench").TryLock), rdb, cnt)
	})
	// Unless go-redis honours the deadline itself.
	b.Run("ctx=deadline,ContextTimeoutEnabled", func(b *testing.B) {
		rdb := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		cnt := &hook{}
		rdb.AddHook(cnt)
		c := dlock.New(rdb)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		benchTryLockUnlock(b, ctx, leaseTry(c.Mutex("bench").TryLock), rdb, cnt)
	})
}

// BenchmarkUncontended is one TryLock+Unlock pair of each primitive on
// one idle Redis, beside the bare protocol (SET NX PX, then a
// compare-and-delete script): redis-µs/op is what Redis spent on the pair.
//
// With DLOCK_BENCH_CALLGRIND=1 the Redis runs under valgrind's callgrind
// and redis-instr/op is the instructions it ran per pair (receiving,
// running and answering both calls): a figure that, unlike µs, holds
// still on a busy machine. Times are then meaningless.
func BenchmarkUncontended(b *testing.B) {
	srv := redistest.StartBench(b)
	c, rdb, cnt := newClient(b, srv)
	ctx := context.Background()
	set := c.MutexSet("bench-set")
	if err := set.Add(ctx, "m"); err != nil {
		b.Fatal(err)
	}
	for _, p := range []struct {
		name string
		try  tryFunc
	}{
		{"Mutex", leaseTry(c.Mutex("bench").TryLock)},
		{"FairMutex", leaseTry(c.FairMutex("bench").TryLock)},
		{"RWMutex-write", leaseTry(c.RWMutex("bench").TryLock)},
		{"RWMutex-read", leaseTry(c.RWMutex("bench").TryRLock)},
		{"MutexSet", leaseTry(set.TryAcquire)},
		{"Semaphore", leaseTry(func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore("bench", 2).TryAcquire(ctx, 1) })},
		{"floor", floorTry(rdb, "floor")},
	} {
		b.Run(p.name, func(b *testing.B) {
			if srv.Counted() {
				srv.Instructions(b)
			}
			benchTryLockUnlock(b, ctx, p.try, rdb, cnt)
			if srv.Counted() {
				// The pair run to warm up, and INFO twice, count too:
				// a few pairs' worth, against thousands.
				b.ReportMetric(float64(srv.Instructions(b))/float64(b.N+1), "redis-instr/op")
			}
		})
	}
}

// tryFunc takes a lock once and returns how to release it.
type tryFunc func(ctx context.Context) (unlock func(context.Context) error, err error)

// leaseTry is the tryFunc of a dlock try call.
func leaseTry(try func(context.Context) (*dlock.Lease, error)) tryFunc {
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := try(ctx)
		if err != nil {
			return nil, err
		}
		return l.Unlock, nil
	}
}

var floorRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// floorTry is the bare protocol on key: SET NX PX, then a
// compare-and-delete script.
func floorTry(rdb *redis.Client, key string) tryFunc {
	const tok = "token-of-thirty-two-characters.."
	return func(ctx context.Context) (func(context.Context) error, error) {
		ok, err := rdb.SetNX(ctx, key, tok, 10*time.Second).Result()
		if err == nil && !ok {
			err = dlock.ErrNotAcquired
		}
		return func(ctx context.Context) error {
			return floorRelease.Run(ctx, rdb, []string{key}, tok).Err()
		}, err
	}
}

// benchTryLockUnlock times try+unlock pairs, after one to warm up
// (scripts loaded, connections open), and reports the commands per pair
// and the time Redis spent on them, when rdb is its one server.
func benchTryLockUnlock(b *testing.B, ctx context.Context, try tryFunc, rdb *redis.Client, cnt *hook) {
	pair := func() {
		unlock, err := try(ctx)
		if err == nil {
			err = unlock(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	pair()
	var usec int64
	if rdb != nil {
		usec = commandMicros(b, rdb)
	}
	before := cnt.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		pair()
	}
	b.StopTimer()
	b.ReportMetric(float64(cnt.Load()-before)/float64(b.N), "rt/op")
	if rdb != nil { // nil: a Redlock's several servers
		b.ReportMetric(float64(commandMicros(b, rdb)-usec)/float64(b.N), "redis-µs/op")
	}
}

// BenchmarkMutexHandoff measures how fast a release reaches a blocked
// waiter. waiters+1 goroutines take turns: hold the lock 2ms, unlock, step
// away 1ms. The others are blocked in Lock at each release, so every
// acquisition is a hand-off. handoff-p50/p99 is the time from Unlock
// being called to the next holder's Lock returning: the release's way to
// Redis and the grant's way back (a hand-off in one message often reaches
// the next holder before the releaser's own Unlock returns); rt/acq counts every
// command all clients sent per acquisition (tries, wake-ups, unlock).
// clients=each gives every goroutine its own dlock client, as separate
// machines; clients=shared puts them all on one. With
// DLOCK_BENCH_CALLGRIND=1, redis-instr/acq is what Redis ran per
// acquisition: a release that hands the lock over, the try that queues
// the releaser again, and the waiters' heartbeats (see BenchmarkUncontended).
func BenchmarkMutexHandoff(b *testing.B) {
	for _, shared := range []bool{false, true} {
		for _, waiters := range []int{1, 8, 64} {
			name := fmt.Sprintf("clients=each/waiters=%d", waiters)
			if shared {
				name = fmt.Sprintf("clients=shared/waiters=%d", waiters)
			}
			b.Run(name, func(b *testing.B) {
				benchHandoff(b, waiters, shared, func(c *dlock.Client) queuedLock {
					return c.Mutex("handoff")
				})
			})
		}
	}
}

// BenchmarkFairHandoff is BenchmarkMutexHandoff for the FairMutex.
func BenchmarkFairHandoff(b *testing.B) {
	for _, shared := range []bool{false, true} {
		for _, waiters := range []int{8, 64} {
			name := fmt.Sprintf("clients=each/waiters=%d", waiters)
			if shared {
				name = fmt.Sprintf("clients=shared/waiters=%d", waiters)
			}
			b.Run(name, func(b *testing.B) {
				benchHandoff(b, waiters, shared, func(c *dlock.Client) queuedLock {
					return c.FairMutex("handoff")
				})
			})
		}
	}
}

// BenchmarkQueuedHandoff is BenchmarkMutexHandoff's clients=shared/waiters=8
// for every queued kind: with DLOCK_BENCH_CALLGRIND=1, its redis-instr/acq
// is what a contended acquisition costs Redis.
func BenchmarkQueuedHandoff(b *testing.B) {
	for _, k := range queuedKinds {
		b.Run(k.name, func(b *testing.B) {
			benchHandoff(b, 8, true, func(c *dlock.Client) queuedLock { return k.get(c, "handoff") })
		})
	}
}

func benchHandoff(b *testing.B, waiters int, shared bool, mk func(*dlock.Client) queuedLock) {
	srv := redistest.StartBench(b)
	ctx := context.Background()
	type worker struct {
		l   queuedLock
		cnt *hook
	}
	workers := make([]worker, waiters+1)
	c, _, cnt := newClient(b, srv)
	for i := range workers {
		if !shared && i > 0 {
			c, _, cnt = newClient(b, srv)
		}
		workers[i] = worker{mk(c), cnt}
	}
	// Warm the script cache.
	if l, err := workers[0].l.Lock(ctx); err == nil {
		l.Unlock(ctx)
	}
	var (
		mu         sync.Mutex
		lastUnlock time.Time
		gaps       = make([]time.Duration, 0, b.N)
		left       atomic.Int64
		wg         sync.WaitGroup
		failed     atomic.Value
	)
	left.Store(int64(b.N))
	sent := func() (n int64) {
		seen := map[*hook]bool{}
		for _, w := range workers {
			if !seen[w.cnt] {
				seen[w.cnt] = true
				n += w.cnt.Load()
			}
		}
		return n
	}
	before := sent()
	if srv.Counted() {
		srv.Instructions(b)
	}
	b.ResetTimer()
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				l, err := w.l.Lock(ctx)
				if err != nil {
					failed.Store(err)
					return
				}
				now := time.Now()
				mu.Lock()
				if !lastUnlock.IsZero() {
					gaps = append(gaps, now.Sub(lastUnlock))
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				lastUnlock = time.Now()
				mu.Unlock()
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
	slices.Sort(gaps)
	if len(gaps) > 0 {
		b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds()), "handoff-p50-µs")
		b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds()), "handoff-p99-µs")
	}
	b.ReportMetric(float64(sent()-before)/float64(b.N), "rt/acq")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acq/s")
	if srv.Counted() {
		b.ReportMetric(float64(srv.Instructions(b))/float64(b.N), "redis-instr/acq")
	}
}

// BenchmarkPing is the floor for one round trip on this machine, to read
// the other figures against.
func BenchmarkPing(b *testing.B) {
	srv := redistest.Start(b)
	_, rdb, _ := newClient(b, srv)
	ctx := context.Background()
	for b.Loop() {
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRWMix runs readers and writers on one RWMutex, each on a
// client of its own, as separate machines. Readers hold their share 2ms
// and pause 1ms; writers hold 2ms and pause 10ms. acq/s counts both
// sides, reads/s and writes/s each; rt/acq is every command all clients
// sent (tries, wake-ups, heartbeats, renewals, unlocks) per acquisition.
func BenchmarkRWMix(b *testing.B) {
	for _, mix := range []struct {
		name             string
		readers, writers int
	}{
		{"read-heavy/readers=32/writers=1", 32, 1},
		{"write-heavy/readers=2/writers=8", 2, 8},
	} {
		for _, mode := range []dlock.RWMode{dlock.PreferWriters, dlock.PreferReaders} {
			b.Run(mix.name+"/"+mode.String(), func(b *testing.B) {
				benchRW(b, mix.readers, mix.writers, mode)
			})
		}
	}
}

func benchRW(b *testing.B, readers, writers int, mode dlock.RWMode) {
	srv := redistest.Start(b)
	ctx := context.Background()
	counters := make([]*hook, readers+writers)
	locks := make([]func(context.Context) (*dlock.Lease, error), readers+writers)
	for i := range locks {
		c, _, cnt := newClient(b, srv)
		rw := c.RWMutex("mix", dlock.WithRWMode(mode))
		counters[i], locks[i] = cnt, rw.RLock
		if i >= readers {
			locks[i] = rw.Lock
		}
	}
	// Warm the script cache.
	for _, lock := range []func(context.Context) (*dlock.Lease, error){locks[0], locks[len(locks)-1]} {
		if l, err := lock(ctx); err == nil {
			l.Unlock(ctx)
		}
	}
	sent := func() (n int64) {
		for _, c := range counters {
			n += c.Load()
		}
		return n
	}
	var (
		left          atomic.Int64
		reads, writes atomic.Int64
		failed        atomic.Value
		wg            sync.WaitGroup
	)
	left.Store(int64(b.N))
	before := sent()
	b.ResetTimer()
	for i, lock := range locks {
		write := i >= readers
		pause, done := time.Millisecond, &reads
		if write {
			pause, done = 10*time.Millisecond, &writes
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				l, err := lock(ctx)
				if err != nil {
					failed.Store(err)
					return
				}
				time.Sleep(2 * time.Millisecond)
				if err := l.Unlock(ctx); err != nil {
					failed.Store(err)
					return
				}
				done.Add(1)
				time.Sleep(pause)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/secs, "acq/s")
	b.ReportMetric(float64(reads.Load())/secs, "reads/s")
	b.ReportMetric(float64(writes.Load())/secs, "writes/s")
	b.ReportMetric(float64(sent()-before)/float64(b.N), "rt/acq")
}

// BenchmarkRedlockTryLockUnlock is the uncontended path of a Redlock
// client on 1, 3 and 5 independent masters: the nodes are asked in
// parallel, so a TryLock and an Unlock cost two round trips of the
// slowest node each; rt/op counts the commands sent to all nodes.
func BenchmarkRedlockTryLockUnlock(b *testing.B) {
	for _, nodes := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			c, _, cnt := newRedlock(b, nodes)
			ctx := context.Background()
			benchTryLockUnlock(b, ctx, leaseTry(c.Mutex("bench").TryLock), nil, cnt)
		})
	}
}

// commandMicros returns the microseconds Redis has spent running the
// commands the benchmarks send: EVALSHA, and SET for the floor. The
// commands that scripts run are inside their script's time.
func commandMicros(b *testing.B, rdb *redis.Client) int64 {
	return redistest.CommandMicros(b, rdb, "evalsha", "set")
}

// BenchmarkOwnKeys is bench scenario 5 in one process, for profiling the
// client: 128 goroutines per CPU (256 on a 2-core machine, as in the
// bench), each taking and releasing a key of its own
// (Lock+Unlock), beside the bare protocol on the same Redis. ns/op is per
// pair, all goroutines together; redis-cpu-µs/op the CPU Redis used per
// pair (INFO cpu), and the client's CPU per pair is the profile's. Each
// runs with context.Background() and, as the bench does, with a ctx that
// has a deadline: dlock then runs its calls on workers, whose scripts go
// to Redis together (see pipeliner).
func BenchmarkOwnKeys(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b, func(o *redis.Options) { o.PoolSize = 64 }) // as the bench module's
	c := dlock.New(rdb)
	defer c.Close()
	for _, p := range []struct {
		name string
		mk   func(i int) tryFunc
	}{
		{"Mutex", func(i int) tryFunc { return leaseTry(c.Mutex(fmt.Sprint("own-", i)).Lock) }},
		{"floor", func(i int) tryFunc { return floorTry(rdb, fmt.Sprint("floor-", i)) }},
	} {
		for _, deadline := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/deadline=%t", p.name, deadline), func(b *testing.B) {
				benchOwnKeys(b, rdb, p.mk, deadline)
			})
		}
	}
}

// benchOwnKeys is one run of BenchmarkOwnKeys: try on a key of its own
// per goroutine, with a ctx that has a deadline or never ends.
func benchOwnKeys(b *testing.B, rdb *redis.Client, mk func(i int) tryFunc, deadline bool) {
	var next atomic.Int64
	b.SetParallelism(128)
	cpu := redistest.CPUMicros(b, rdb)
	b.ResetTimer()
	defer func() {
		b.ReportMetric(float64(redistest.CPUMicros(b, rdb)-cpu)/float64(b.N), "redis-cpu-µs/op")
	}()
	b.RunParallel(func(pb *testing.PB) {
		try := mk(int(next.Add(1)))
		ctx := context.Background()
		if deadline {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Hour)
			defer cancel()
		}
		for pb.Next() {
			unlock, err := try(ctx)
			if err == nil {
				err = unlock(ctx)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
