package dlock

import (
	"context"
)

// FairMutex is a mutual exclusion lock that serves waiters in the order
// they arrived at Redis (first come, first served), across all clients.
//
// Why FIFO: with a lock that newcomers may take, the holder that just
// unlocked, or the caller nearest to Redis, can win again and again while
// others wait. Here Lock joins a queue kept in Redis, ordered by Redis
// itself (not by client clocks), a free lock goes only to the first in
// line, and a release hands the lock to exactly that waiter, not every
// waiter, so a handoff costs one message however many wait.
//
// Limits of the order: it is the order in which Lock calls reached Redis.
// A waiter that dies, or whose heartbeat (every second) cannot reach Redis
// for 3 seconds, is passed over when its turn comes, losing its place; when
// it calls again it joins at the end.
// A waiter whose context ends leaves the queue at once. A Redis restart
// without persistence forgets the queue: waiters then re-queue in the
// order of their next heartbeat.
//
// TryLock never jumps the queue: it succeeds only when the lock is free
// and nobody waits.
type FairMutex struct{ *queued }

var _ Locker = (*FairMutex)(nil)

// FairMutex returns the fair mutex called name. It is a lock of its own,
// separate from the Mutex of the same name. Invalid names or options do
// not panic: every call then fails with ErrInvalid.
func (c *Client) FairMutex(name string, opts ...LockOption) *FairMutex {
	return &FairMutex{c.queued(kindFair, name, opts)}
}

// TryLock takes the lock if it is free and no one is queued for it, in one
// round trip. Otherwise it returns ErrNotAcquired and changes nothing.
func (f *FairMutex) TryLock(ctx context.Context) (*Lease, error) {
	return f.acquire(ctx, false)
}

// Lock joins the queue and waits for its turn. It returns an error
// matching both ErrNotAcquired and ctx.Err() when ctx ends first, and one
// matching ErrNotAcquired when WithStallTimeout ran out; either way the
// caller gives up its place in the queue (once ctx has ended, in the
// background, a round trip later: a lock handed to it meanwhile goes on
// to the next).
func (f *FairMutex) Lock(ctx context.Context) (*Lease, error) {
	return f.acquire(ctx, true)
}

// Do locks, runs fn, and unlocks, as Mutex.Do does.
func (f *FairMutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return do(ctx, f.Lock, fn)
}

// Status reports the holder and the live waiters in queue order.
func (f *FairMutex) Status(ctx context.Context) (Status, error) {
	return f.queued.Status(ctx)
}
