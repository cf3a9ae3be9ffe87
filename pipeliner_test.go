package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// pairsOnOwnKeys runs n TryLock+Unlock pairs on each of goroutines keys
// of their own, all at once, with ctx, and returns the first error.
func pairsOnOwnKeys(ctx context.Context, c *dlock.Client, goroutines, n int) error {
	return together(goroutines, func(g int) error {
		m := c.Mutex(fmt.Sprint("own-", g))
		for range n {
			l, err := m.TryLock(ctx)
			if err != nil {
				return err
			}
			if l.Fence() == 0 {
				return errors.New("lease without a fence")
			}
			if err := l.Unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}

// Calls that come together, from goroutines whose ctx can end, share
// round trips: some pipelines carry several scripts, and every call gets
// its own answer.
func TestCallsTogetherShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	c, _, cnt := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const goroutines, pairs = 64, 20
	if err := pairsOnOwnKeys(ctx, c, goroutines, pairs); err != nil {
		t.Fatal(err)
	}
	cmds, trips := cnt.Load(), cnt.trips.Load()
	if cmds < 2*goroutines*pairs {
		t.Fatalf("%d commands for %d pairs", cmds, goroutines*pairs)
	}
	if trips >= cmds {
		t.Fatalf("%d round trips for %d commands: no call shared one", trips, cmds)
	}
	t.Logf("%d commands in %d round trips", cmds, trips)
}

// A script Redis lost (a restart, SCRIPT FLUSH) is loaded again for calls
// that met NOSCRIPT in a pipeline together.
func TestPipelinedCallsReloadScripts(t *testing.T) {
	srv := redistest.Start(t)
	c, rdb, cnt := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range 3 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := pairsOnOwnKeys(ctx, c, 32, 1); err != nil {
			t.Fatal(err)
		}
	}
	if cmds, trips := cnt.Load(), cnt.trips.Load(); trips >= cmds {
		t.Fatalf("%d round trips for %d commands: no pipeline carried more than one call", trips, cmds)
	}
}

// Calls that wait for a pipeline behind others sent to a paused Redis
// return by their ctx deadline, and once Redis answers again the calls
// after them go through: nothing is left waiting for a pipeline.
func TestPipelinedCallsReturnByDeadlineWhilePaused(t *testing.T) {
	srv := redistest.Start(t)
	c, _, _ := newClient(t, srv)
	srv.Pause(t)
	const goroutines, wait = 32, 200 * time.Millisecond
	err := together(goroutines, func(g int) error {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		start := time.Now()
		_, err := c.Mutex(fmt.Sprint("paused-", g)).TryLock(ctx)
		if took := time.Since(start); err == nil || took > wait+150*time.Millisecond {
			return fmt.Errorf("TryLock on a paused Redis: %v after %v, ctx deadline %v", err, took, wait)
		}
		return nil
	})
	srv.Resume(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := pairsOnOwnKeys(ctx, c, goroutines, 5); err != nil {
		t.Fatal(err)
	}
}

// Releases that go in one pipeline are sent once: when the pipeline's
// reply is lost, go-redis does not send it again (where each release
// would find its lease gone and report it lost), and each Unlock sends
// its release again itself, counting a lease gone then as released.
func TestPipelinedReleasesSentOnce(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()}) // go-redis' retries on
	t.Cleanup(func() { _ = rdb.Close() })
	cnt := &hook{}
	rdb.AddHook(cnt)
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	leases := make([]*dlock.Lease, 10)
	for i := range leases {
		leases[i] = mustTake(t, ctx, c.Mutex(fmt.Sprint("once-", i)).TryLock)
	}
	cmds, trips := cnt.Load(), cnt.trips.Load()
	errs := make(chan error, len(leases))
	unlock := func(ls []*dlock.Lease) {
		for _, l := range ls {
			go func() { errs <- l.Unlock(ctx) }()
		}
	}
	// Four releases fill the pipeliner's flights on a paused Redis; the
	// six after them wait, and go in one pipeline, whose reply is lost.
	srv.Pause(t)
	unlock(leases[:4])
	time.Sleep(100 * time.Millisecond)
	dropped := p.DropReply(leases[5].Token(), false, nil)
	unlock(leases[4:])
	time.Sleep(100 * time.Millisecond)
	srv.Resume(t)
	for range leases {
		if err := <-errs; err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
	select {
	case <-dropped:
	default:
		t.Fatal("no reply lost")
	}
	if cmds, trips := cnt.Load()-cmds, cnt.trips.Load()-trips; trips >= cmds {
		t.Fatalf("%d round trips for %d commands: the releases went alone", trips, cmds)
	}
	other, _, _ := newClient(t, srv)
	for i, l := range leases {
		if isClosed(l.Lost()) {
			t.Errorf("lease %d: Lost() closed for a lease released", i)
		}
		mustTake(t, ctx, other.Mutex(fmt.Sprint("once-", i)).TryLock)
	}
}

// fillFlights starts four TryLocks with no deadline on c, which take the
// flights of its pipeliner on a paused Redis, and returns their errors'
// channel: a call after them waits for a pipeline.
func fillFlights(c *dlock.Client) <-chan error {
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			_, err := c.Mutex(fmt.Sprint("flight-", i)).TryLock(context.Background())
			errs <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	return errs
}

// A call that waits for a pipeline and whose ctx ends before the
// pipeline goes is not sent: a TryLock given up leaves nothing in Redis
// for a give-up to withdraw (which, behind a long queue, could come
// after the give-up stopped waiting).
func TestQueuedCallWhoseCtxEndedIsNotSent(t *testing.T) {
	srv := redistest.Start(t)
	cnt := &hook{mark: "given-up"}
	c, _ := hooked(t, srv, cnt)
	srv.Pause(t)
	flights := fillFlights(c)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Mutex("given-up", dlock.WithMetadata(cnt.mark)).TryLock(ctx)
	srv.Resume(t)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock on a paused Redis: %v, want its ctx's deadline", err)
	}
	for range 4 {
		if err := <-flights; err != nil {
			t.Fatal(err)
		}
	}
	cnt.settle(t)
	if n := cnt.markedAll(); n > 0 {
		t.Fatalf("the try whose ctx ended while it waited for a pipeline was sent (%d commands)", n)
	}
	mustTake(t, t.Context(), newClientOnly(t, srv).Mutex("given-up").TryLock)
}

// Calls queued behind pipelines that a Redis that does not answer holds
// fail once they have waited the client's PoolTimeout, as a command
// waiting for a connection does, unsent: however many are queued, none
// waits for the pipelines before it, each of which takes a ReadTimeout
// (or more, for go-redis' retries).
func TestQueuedCallsGiveUpByPoolTimeout(t *testing.T) {
	srv := redistest.Start(t)
	const readTimeout, poolTimeout = 3 * time.Second, 500 * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: readTimeout, PoolTimeout: poolTimeout})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := pairsOnOwnKeys(ctx, c, 16, 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	flights := fillFlights(c)
	// 4x128 calls go in each round of pipelines, a ReadTimeout each:
	// without the PoolTimeout the last of these would wait ten rounds,
	// and without a sweep of the queue the first would wait one.
	const queued = 5000
	var timedOut atomic.Int64
	longest := make([]time.Duration, queued)
	err := together(queued, func(g int) error {
		start := time.Now()
		_, err := c.Mutex(fmt.Sprint("queued-", g)).TryLock(context.Background())
		longest[g] = time.Since(start)
		switch {
		case err == nil:
			return errors.New("TryLock on a paused Redis took the lock")
		case errors.Is(err, redis.ErrPoolTimeout):
			timedOut.Add(1)
		}
		return nil
	})
	srv.Resume(t)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		<-flights
	}
	took := slices.Max(longest)
	t.Logf("%d of %d queued calls failed by the PoolTimeout; the longest took %v", timedOut.Load(), queued, took)
	if timedOut.Load() == 0 {
		t.Fatal("no queued call failed by the PoolTimeout")
	}
	if max := poolTimeout + 1500*time.Millisecond; took > max {
		t.Fatalf("a queued call took %v to fail; want at most %v (the PoolTimeout)", took, max)
	}
	if err := pairsOnOwnKeys(ctx, c, 32, 5); err != nil {
		t.Fatal(err)
	}
}
