package dlock

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/redistest"
)

// An operator's ForceUnlock of an RWMutex seen held by readers alone
// removes the readers, but no writer that took the lock since it looked.
func TestForceUnlockOfReadersSparesALaterWriter(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := New(srv.Client(t))
	t.Cleanup(func() { c.Close() })
	rw := c.RWMutex("spared")
	r, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := rw.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := seenHolder(st)
	// What ForceUnlock sends for the readers it saw.
	force := func() int {
		t.Helper()
		ks, args := rw.holders().forceArgs(c.hub.PublishCommand(), seen)
		n, err := eval(ctx, c, forceUnlock, (*redis.Cmd).Int, ks, args...)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := force(); n < 1 {
		t.Fatalf("force unlock of the readers seen: %d; want them removed", n)
	}
	if held, err := r.Held(ctx); err != nil || held {
		t.Errorf("the reader's Held = %v, %v after the operator's unlock; want gone", held, err)
	}
	// A writer takes the lock between the operator's look and its unlock.
	w, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Unlock(ctx)
	if n := force(); n != -1 {
		t.Fatalf("force unlock of readers seen, a writer holding: %d; want -1, the holder changed", n)
	}
	if held, err := w.Held(ctx); err != nil || !held {
		t.Errorf("the writer's Held = %v, %v after the operator's unlock of the readers; want still held", held, err)
	}
}
