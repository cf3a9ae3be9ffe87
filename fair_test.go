package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
)

// waitQueued waits until the lock's status lists n waiters.
func waitQueued(t *testing.T, l interface {
	Status(context.Context) (dlock.Status, error)
}, n int) {
	t.Helper()
	err := eventually(t.Context(), 5*time.Second, func() error {
		if st := statusOf(t, l); len(st.Waiters) != n {
			return fmt.Errorf("%d waiters queued, want %d", len(st.Waiters), n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestArrivalOrder: waiters queued one after another, on one client and
// on clients of their own, get the lock in the order they arrived. With
// no newcomers, that holds for a Mutex and an RWMutex's writers too.
func TestArrivalOrder(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) { testArrivalOrder(t, k.get) })
	}
}

func testArrivalOrder(t *testing.T, get func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock) {
	srv, ctx := serve(t)
	holderC, _, _ := newClient(t, srv)
	f := get(holderC, "line", dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, f.Lock)
	const n = 8
	var mu sync.Mutex
	var order []int
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		// Half the waiters share a client, half have their own.
		c := holderC
		if i%2 == 1 {
			c, _, _ = newClient(t, srv)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := get(c, "line", dlock.WithMetadata(fmt.Sprint("waiter-", i))).Lock(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			errs[i] = l.Unlock(ctx)
		}()
		waitQueued(t, f, i+1) // arrival order is known
	}
	st, err := f.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range st.Waiters {
		if want := fmt.Sprint("waiter-", i); w.Metadata != want {
			t.Errorf("queue position %d: %q, want %q", i, w.Metadata, want)
		}
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v, want 0..%d", order, n-1)
		}
	}
}

func TestFairTryLockDoesNotJumpQueue(t *testing.T) {
	c, ctx := start(t)
	f := c.FairMutex("q", dlock.WithTTL(30*time.Second))
	l, err := f.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a free lock with no queue: %v", err)
	}
	got := takeAndRelease(ctx, f.Lock)
	waitQueued(t, f, 1)
	if _, err := f.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while held: %v", err)
	}
	// Release: the lock is free for an instant, but the waiter is first.
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestFairDeadWaitersAhead: a SIGKILLed waiter process and a cancelled
// waiter are ahead of a live one behind a 30s lease. After the release,
// the live waiter gets the lock within the waiter liveness timeout (3s),
// not the lock TTL.
func TestFairDeadWaitersAhead(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	f := c.FairMutex("dead-ahead", dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, f.Lock)

	// 1st in line: a process that will be killed.
	doomed := startHelper(t, srv, "queue", "dead-ahead")
	waitQueued(t, f, 1)

	// 2nd: a waiter whose context will be cancelled.
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() {
		_, err := c.FairMutex("dead-ahead").Lock(cctx)
		cancelled <- err
	}()
	waitQueued(t, f, 2)

	// 3rd: the live waiter.
	live := make(chan time.Time, 1)
	go func() {
		l, err := c.FairMutex("dead-ahead").Lock(ctx)
		if err != nil {
			t.Error(err)
			live <- time.Time{}
			return
		}
		live <- time.Now()
		l.Unlock(ctx)
	}()
	waitQueued(t, f, 3)

	if err := doomed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-doomed.exited
	cancel()
	if err := <-cancelled; !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	released := time.Now()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-live:
		if d := at.Sub(released); d > 3*time.Second+500*time.Millisecond {
			t.Errorf("live waiter got the lock %v after the release; liveness timeout is 3s", d)
		} else {
			t.Logf("live waiter got the lock %v after the release", d.Round(time.Millisecond))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("live waiter still waiting 10s after the release")
	}
}

func TestFairStatusAndLoss(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	f := c.FairMutex("fs", dlock.WithTTL(time.Second), dlock.WithMetadata("boss"))
	err := f.Do(ctx, func(ctx context.Context) error {
		st, err := f.Status(ctx)
		if err != nil {
			return err
		}
		if !st.Held || st.Metadata != "boss" || st.Kind != "fair" || len(st.Waiters) != 0 {
			return fmt.Errorf("status while held: %+v", st)
		}
		rdb.FlushAll(context.Background())
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), dlock.ErrLost) {
				return fmt.Errorf("cause %v", context.Cause(ctx))
			}
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("not told of the loss")
		}
	})
	if !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost from the unlock", err)
	}
}

// TestFairRoundTripsBounded: 64 waiters on one lock; the round trips per
// acquisition stay small, since each release wakes one waiter.
func TestFairRoundTripsBounded(t *testing.T) {
	srv, ctx := serve(t)
	c, _, cnt := newClient(t, srv)
	f := c.FairMutex("many", dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, f.Lock)
	const n = 64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := f.Lock(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			errs[i] = err
		}()
	}
	waitQueued(t, f, n)
	cnt.settle(t)
	before := cnt.trips.Load()
	start := time.Now()
	h.Unlock(ctx)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	per := float64(cnt.trips.Load()-before) / n
	// An unlock per acquisition (a lease handed over and released at
	// once needs no renewal), half a spare, plus the batches of
	// heartbeats (one a second for all waiters) while the queue drains.
	limit := 1.5 + (time.Since(start).Seconds()+1)/n
	t.Logf("%.2f round trips per acquisition, %d acquisitions in %v", per, n, time.Since(start).Round(time.Millisecond))
	if per > limit {
		t.Errorf("%.2f round trips per acquisition, want at most %.2f", per, limit)
	}
}
