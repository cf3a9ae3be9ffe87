package dlock

import (
	"context"
	"sync"
)

// turn is a mutex whose waiters give up when their ctx ends: a lease's
// Refresh and Unlock take turns with it, so that one waiting behind the
// other's exchange with Redis still returns by its own deadline. It
// allocates only while someone waits.
type turn struct {
	mu   sync.Mutex
	busy bool
	// free, made by the first waiter, is closed when the turn is given
	// back.
	free chan struct{}
}

// take takes the turn, or returns ctx's error if ctx ends first.
func (t *turn) take(ctx context.Context) error {
	for {
		t.mu.Lock()
		if !t.busy {
			t.busy = true
			t.mu.Unlock()
			return nil
		}
		if t.free == nil {
			t.free = make(chan struct{})
		}
		free := t.free
		t.mu.Unlock()
		select {
		case <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// give gives the turn back, waking those waiting for it.
func (t *turn) give() {
	t.mu.Lock()
	t.busy = false
	if t.free != nil {
		close(t.free)
		t.free = nil
	}
	t.mu.Unlock()
}
