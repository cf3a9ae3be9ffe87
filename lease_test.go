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
