package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/redistest"
)

// A lease that ran out is never taken up again, even while more expired
// leases wait to be cleared than one script clears (100): a try sent again
// with its token gets a new lease with a new fence, and its release finds
// nothing to release.
func TestSemaphoreExpiredLeaseStaysGone(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := New(srv.Client(t))
	t.Cleanup(func() { c.Close() })
	s := c.Semaphore("expired", 1000, WithTTL(50*time.Millisecond), WithAutoRefresh(false))
	try := func(tok string) attempt {
		t.Helper()
		r, err := s.acquisition(1, false).try(ctx, tok)
		if err != nil || !r.ok {
			t.Fatalf("try %s: %+v, %v", tok, r, err)
		}
		return r
	}
	// A lease that outlives the others keeps the keys.
	keeper, err := c.Semaphore("expired", 1000, WithTTL(time.Minute)).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Unlock(ctx)
	for i := range 150 {
		try(fmt.Sprint("early-", i))
	}
	first := try("late")
	time.Sleep(100 * time.Millisecond)
	if ok, err := (permits{s}).release(ctx, "early-149"); ok || err != nil {
		t.Errorf("release of an expired lease = %v, %v; want false", ok, err)
	}
	if again := try("late"); again.fence <= first.fence {
		t.Errorf("a try again with an expired lease's token got fence %d, not above its old %d", again.fence, first.fence)
	}
	st, err := s.Status(ctx)
	if err != nil || st.InUse != 2 {
		t.Errorf("status %+v, %v: want the keeper and the new lease in use", st, err)
	}
}

// Sizes up to MaxPermits count exactly: a full semaphore admits no more.
func TestSemaphoreLargestSize(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := New(srv.Client(t))
	t.Cleanup(func() { c.Close() })
	s := c.Semaphore("largest", MaxPermits)
	l, err := s.TryAcquire(ctx, MaxPermits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, 1); err == nil {
		t.Fatal("a permit beyond MaxPermits was admitted")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The count of permits in use goes with the leases: when the leases key
// is lost on its own, the count is not kept, and when the main key is,
// the holders find their leases gone.
func TestSemaphoreKeysLostApart(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	c := New(rdb)
	t.Cleanup(func() { c.Close() })
	s := c.Semaphore("apart", 2, WithAutoRefresh(false))
	l, err := s.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, s.keys.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx, time.Minute); err == nil {
		t.Error("Refresh with the main key gone succeeded")
	}
	if _, err := s.TryAcquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, s.keys.Part("leases")).Err(); err != nil {
		t.Fatal(err)
	}
	if l2, err := s.TryAcquire(ctx, 2); err != nil {
		t.Errorf("with the leases gone, the count kept the permits: %v", err)
	} else {
		l2.Unlock(ctx)
	}
}

// A lease that ran out while the main key is gone (the two keys expire
// apart, by a millisecond or by the server's expiry cycle) is cleared
// like any other: the try that finds it takes its permits, with no count
// to take the lease's from.
func TestSemaphoreExpiredLeaseWithoutCount(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	c := New(rdb)
	t.Cleanup(func() { c.Close() })
	keeper, err := c.Semaphore("uncounted", 2, WithTTL(time.Minute)).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Unlock(ctx)
	s := c.Semaphore("uncounted", 2, WithTTL(50*time.Millisecond), WithAutoRefresh(false))
	if _, err := s.TryAcquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, s.keys.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	l, err := s.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatalf("TryAcquire after an expired lease without its count: %v", err)
	}
	l.Unlock(ctx)
}
