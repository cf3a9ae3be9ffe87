package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
)

// TestDoReleasesWhenFnPanics: a panic in Do's function goes on to the
// caller, once the lease is released: recovered upstream (an HTTP server
// does), it must not leave the lock held for as long as the process lives.
func TestDoReleasesWhenFnPanics(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	m := c.Mutex("panics", dlock.WithTTL(10*time.Second))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the function's panic", r)
			}
		}()
		_ = m.Do(ctx, func(context.Context) error { panic("boom") })
	}()
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Do's function panicked: %v; want the lock released", err)
	}
	mustUnlock(t, l)
	if err := m.Do(ctx, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Do(nil): %v, want ErrInvalid", err)
	}
	if err := c.MutexSet("panics").Do(ctx, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("MutexSet.Do(nil): %v, want ErrInvalid", err)
	}
}

// TestDoReturnsByItsDeadline: Do returns soon after its ctx's deadline
// (half a second at most, for the release) even when Redis cannot take
// the release then, which goes on in the background: it took the 5s of a
// detached Unlock.
func TestDoReturnsByItsDeadline(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	m := c.Mutex("deadline", dlock.WithTTL(10*time.Second))
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	paused := false
	start := time.Now()
	err := m.Do(dctx, func(ctx context.Context) error {
		srv.Pause(t)
		paused = true
		<-ctx.Done()
		return ctx.Err()
	})
	took := time.Since(start)
	if paused {
		srv.Resume(t)
	}
	if !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
		t.Fatalf("Do with Redis paused at its deadline: %v after %v; want the deadline's error at about 300ms", err, took)
	}
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	l, err := m.Lock(lctx) // the release, once Redis answers again
	if err != nil {
		t.Fatalf("Lock after Do: %v; want the lock released in the background", err)
	}
	mustUnlock(t, l)
}

// TestDoGraceWhenDeadlineFallsDuringRelease: fn returns 30ms before ctx's
// deadline and Redis answers the release 100ms after the deadline, within
// the half second README promises (releaseGrace): Do returns fn's nil,
// and the lock is free, not an unlock error with the release left to the
// background.
func TestDoGraceWhenDeadlineFallsDuringRelease(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	m := c.Mutex("grace", dlock.WithTTL(10*time.Second))
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	dl, _ := dctx.Deadline()
	resumed := make(chan struct{})
	err := m.Do(dctx, func(ctx context.Context) error {
		time.Sleep(time.Until(dl) - 30*time.Millisecond)
		srv.Pause(t)
		go func() {
			time.Sleep(time.Until(dl) + 100*time.Millisecond)
			srv.Resume(t)
			close(resumed)
		}()
		return nil
	})
	<-resumed
	if err != nil {
		t.Fatalf("Do: %v; want nil: the release was answered 100ms after the deadline, within releaseGrace", err)
	}
	if st := statusOf(t, m); st.Held {
		t.Error("the lock is held after Do returned nil")
	}
}

// TestDoGraceAfterOverrun: fn ignores ctx and returns 800ms after a 100ms
// deadline, Redis healthy: the release gets its grace from fn's return
// (Do returns nil, the lock free), not from a deadline already past.
func TestDoGraceAfterOverrun(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	m := c.Mutex("overrun", dlock.WithTTL(10*time.Second))
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := m.Do(dctx, func(ctx context.Context) error {
		time.Sleep(800 * time.Millisecond)
		return nil
	})
	held := statusOf(t, m).Held
	if err != nil || held {
		t.Fatalf("Do after fn overran its deadline, Redis healthy: %v, held after: %v; want nil, free", err, held)
	}
}
