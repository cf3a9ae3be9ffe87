package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/go-dlock/dlock/internal/keys"
)

// Waiter liveness of a FairMutex. A queued waiter renews its place every
// fairHeartbeat; one that has not done so for fairLiveness (it died, or
// cannot reach Redis) is dropped from the queue, so a dead waiter delays
// the ones behind it by at most fairLiveness, never by a lock TTL.
const (
	fairHeartbeat = time.Second
	fairLiveness  = 3 * time.Second
)

// FairMutex is a mutual exclusion lock that serves waiters in the order
// they arrived at Redis (first come, first served), across all clients.
//
// Why FIFO: with a plain Mutex, the holder that just unlocked, or the
// waiter nearest to Redis, can win again and again while others starve.
// Here Lock joins a queue kept in Redis, ordered by Redis itself (not by
// client clocks), and a release wakes exactly the first live waiter in it,
// not every waiter, so a handoff costs a message and a try however many
// wait.
//
// Limits of the order: it is the order in which Lock calls reached Redis.
// A waiter that dies, or whose heartbeat (every second) cannot reach Redis
// for 3 seconds, loses its place; when it calls again it joins at the end.
// A waiter whose context ends leaves the queue at once. A Redis restart
// without persistence forgets the queue: waiters then re-queue in the
// order of their next heartbeat.
//
// TryLock never jumps the queue: it succeeds only when the lock is free
// and nobody waits.
type FairMutex struct {
	owner
	c    *Client
	name string
	cfg  lockConfig
	keys keys.Lock
	err  error
}

var _ Locker = (*FairMutex)(nil)

// FairMutex returns the fair mutex called name. It is a lock of its own,
// separate from the Mutex of the same name. Invalid names or options do
// not panic: every call then fails with ErrInvalid.
func (c *Client) FairMutex(name string, opts ...LockOption) *FairMutex {
	f := &FairMutex{c: c, name: name, cfg: newLockConfig(opts)}
	f.keys, f.err = c.lockKeys(keys.KindFair, name)
	if f.err == nil {
		f.err = f.cfg.err
	}
	f.owner = owner{rdb: c.rdb, key: f.keys.Key()}
	return f
}

// TryLock takes the lock if it is free and no one is queued for it, in one
// round trip. Otherwise it returns ErrNotAcquired and changes nothing.
func (f *FairMutex) TryLock(ctx context.Context) (*Lease, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.c.acquire(ctx, f.acquisition(false), false)
}

// Lock joins the queue and waits for its turn. It returns an error
// matching both ErrNotAcquired and ctx.Err() when ctx ends first, and one
// matching ErrNotAcquired when WithStallTimeout ran out; either way the
// caller has left the queue.
func (f *FairMutex) Lock(ctx context.Context) (*Lease, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.c.acquire(ctx, f.acquisition(true), true)
}

// Do locks, runs fn, and unlocks, as Mutex.Do does.
func (f *FairMutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return do(ctx, f.Lock, fn)
}

// Status reports the holder and the live waiters in queue order.
func (f *FairMutex) Status(ctx context.Context) (Status, error) {
	if f.err != nil {
		return Status{}, f.err
	}
	v, err := fairStatus.Run(ctx, f.c.rdb, f.keyList()).Slice()
	if err != nil {
		return Status{}, fmt.Errorf("dlock: status of fair mutex %q: %w", f.name, err)
	}
	if len(v) < 6 {
		return Status{}, fmt.Errorf("dlock: status of fair mutex %q: unexpected reply %v", f.name, v)
	}
	st := ownerStatus(f.name, keys.KindFair, v)
	q, _ := v[5].([]any)
	for i := 0; i+1 < len(q); i += 2 {
		meta, _ := q[i].(string)
		st.Waiters = append(st.Waiters, Waiter{Metadata: meta, Since: time.UnixMilli(toInt(q[i+1]))})
	}
	return st, nil
}

func (f *FairMutex) keyList() []string {
	return []string{f.keys.Key(), f.keys.Part("fence"), f.keys.Part("queue"), f.keys.Part("alive"), f.keys.Part("wmeta")}
}

func (f *FairMutex) acquisition(queue bool) *acquisition {
	enqueue := 0
	if queue {
		enqueue = 1
	}
	return &acquisition{
		kind:      "fair mutex",
		name:      f.name,
		cfg:       f.cfg,
		channel:   f.keys.Channel(),
		heartbeat: fairHeartbeat,
		try: func(ctx context.Context, tok string) (attempt, error) {
			v, err := fairAcquire.Run(ctx, f.c.rdb, f.keyList(),
				tok, millis(f.cfg.ttl), f.cfg.metadata, enqueue, millis(fairLiveness)).Slice()
			if err != nil {
				return attempt{}, err
			}
			return parseAttempt(v)
		},
		grant: func(tok string, r attempt, sent time.Time) *Lease {
			return newLease(f.name, tok, r.fence, f, f.cfg, sent)
		},
		leave: func(ctx context.Context, tok string) {
			err := fairLeave.Run(ctx, f.c.rdb, f.keyList(), tok, f.c.hub.PublishCommand(), f.keys.Channel()).Err()
			if err != nil {
				f.c.log.Warn("dlock: leaving the queue failed; the place lapses with its heartbeat",
					"lock", f.name, "err", err)
			}
		},
	}
}

func (f *FairMutex) release(ctx context.Context, tok string) (bool, error) {
	return fairRelease.Run(ctx, f.c.rdb, f.keyList(), tok, f.c.hub.PublishCommand(), f.keys.Channel()).Bool()
}
