package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// TestLostClosesWhileUnlockHangs: an Unlock stuck on a paused Redis does
// not hold back Lost(): it closes before the lease could have expired in
// Redis, and Unlock returns by its ctx deadline, leaving the lease watched.
func TestLostClosesWhileUnlockHangs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, _, _ := newClient(t, srv)
	const ttl = time.Second
	l, err := c.Mutex("hang", dlock.WithTTL(ttl)).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	srv.Pause(t)
	defer srv.Resume(t)
	const wait = 3 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	select {
	case <-l.Lost():
		if d := time.Since(paused); d >= ttl {
			t.Errorf("Lost() closed %v after the pause; must be before the TTL %v", d, ttl)
		}
	case err := <-unlocked:
		t.Fatalf("Unlock returned %v before Lost() closed", err)
	case <-time.After(wait):
		t.Fatal("Lost() did not close while Unlock hung")
	}
	select {
	case err := <-unlocked:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Unlock: %v, want DeadlineExceeded", err)
		}
	case <-time.After(wait + 250*time.Millisecond):
		t.Errorf("Unlock did not return by its deadline (%v)", wait)
	}
	srv.Resume(t)
	if err := l.Unlock(t.Context()); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock after loss: %v, want ErrLost", err)
	}
}

// TestFailedUnlockReleasesInBackground: an Unlock that cannot reach Redis
// does not leave the lease renewed for ever (dropping it, as Do does, would
// then keep the lock held): the release goes on in the background for as
// long as the lease could live, and another client gets the lock soon
// after Redis is back, long before the TTL; a retried Unlock then reports
// success. So for a lease that never expires, and for one whose TTL a
// Refresh lengthened while Redis stays away longer than the first TTL.
func TestFailedUnlockReleasesInBackground(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opts    []dlock.LockOption
		refresh time.Duration // if set, Refresh to it after Lock
		pause   time.Duration
	}{
		{"TTL 30s", []dlock.LockOption{dlock.WithTTL(30 * time.Second)}, 0, 300 * time.Millisecond},
		{"no expiry", []dlock.LockOption{dlock.WithNoExpiry()}, 0, 300 * time.Millisecond},
		{"TTL 1s refreshed to 1m", []dlock.LockOption{dlock.WithTTL(time.Second)}, time.Minute, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c, _, _ := newClient(t, srv)
			other, _, _ := newClient(t, srv)
			l, err := c.Mutex("bg", tc.opts...).Lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if tc.refresh > 0 {
				if err := l.Refresh(t.Context(), tc.refresh); err != nil {
					t.Fatal(err)
				}
			}
			srv.Pause(t)
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			if err := l.Unlock(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Unlock against a paused Redis: %v, want DeadlineExceeded", err)
			}
			time.Sleep(tc.pause)
			srv.Resume(t)
			lctx, lcancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer lcancel()
			next, err := other.Mutex("bg").Lock(lctx)
			if err != nil {
				t.Fatalf("another client: %v; want the lock released in the background", err)
			}
			defer next.Unlock(t.Context())
			if err := l.Unlock(t.Context()); err != nil {
				t.Errorf("Unlock again after the background release: %v, want nil", err)
			}
			select {
			case <-l.Lost():
				t.Error("Lost() closed for a lease that was released")
			default:
			}
		})
	}
}
