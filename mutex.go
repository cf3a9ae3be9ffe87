package dlock

import (
	"context"
)

// Mutex is a mutual exclusion lock shared by every client of the same
// Redis under the same name. A Mutex value holds no state of its own: each
// successful TryLock or Lock returns a Lease, and any number of goroutines
// may use one Mutex.
//
// Waiting callers queue in Redis, and a release hands the lock to exactly
// one of them, the first in line, with the message that wakes it, however
// many wait on however many clients. As with sync.Mutex, a caller that
// arrives while the lock is free may take it ahead of the queue (so the
// uncontended path stays one round trip), but only while the first waiter
// has waited less than a millisecond: after that a release hands the lock
// to the first in line, so no waiter starves. A waiter that dies is passed
// over once 3 seconds have gone by since its last heartbeat (every
// second). Use FairMutex for strict arrival order.
type Mutex struct{ b mutexBackend }

// mutexBackend is where a Mutex is held: the queued lock of one Redis
// deployment, or a majority of a Redlock client's masters.
type mutexBackend interface {
	acquire(ctx context.Context, block bool) (*Lease, error)
	Status(ctx context.Context) (Status, error)
}

var _ Locker = (*Mutex)(nil)

// Mutex returns the mutex called name. Invalid names or options do not
// panic: every call of the Mutex then fails with ErrInvalid.
func (c *Client) Mutex(name string, opts ...LockOption) *Mutex {
	q := c.queued(kindMutex, name, opts)
	if c.nodes != nil {
		return &Mutex{newRedlockMutex(q)}
	}
	return &Mutex{q}
}

// TryLock takes the mutex if it is free, in one round trip. If another
// lease holds it, or a waiter has been kept waiting for it too long,
// TryLock returns ErrNotAcquired and changes nothing.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.b.acquire(ctx, false)
}

// Lock takes the mutex, waiting while it is held: until a release wakes
// this caller, or the holder's lease runs out. It returns an error
// matching both ErrNotAcquired and ctx.Err() when ctx ends first, and one
// matching ErrNotAcquired when WithStallTimeout ran out; either way it
// leaves the mutex unchanged and the caller out of its queue.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.b.acquire(ctx, true)
}

// Do locks the mutex, runs fn, and unlocks. fn's context is cancelled, with
// cause ErrLost (see context.Cause), the moment the lease is lost. Do
// returns fn's error joined with any error from Unlock. If fn panics, the
// lease is released and the panic goes on. Once ctx has ended, Do waits
// for the release at most half a second more, then returns and leaves it
// to go on in the background. A nil fn is ErrInvalid. Every primitive's
// Do does the same.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return do(ctx, m.Lock, fn)
}

// Status reports who holds the mutex, for how much longer, its fence, and
// the callers waiting for it.
func (m *Mutex) Status(ctx context.Context) (Status, error) {
	return m.b.Status(ctx)
}
