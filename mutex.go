package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/go-dlock/dlock/internal/keys"
)

// Mutex is a mutual exclusion lock shared by every client of the same
// Redis under the same name. A Mutex value holds no state of its own: each
// successful TryLock or Lock returns a Lease, and any number of goroutines
// may use one Mutex.
//
// Waiters are not served in order: a released Mutex goes to whichever
// waiter's try reaches Redis first, and the holder that just unlocked may
// take it again at once, as with sync.Mutex. Use FairMutex for arrival
// order.
type Mutex struct {
	owner
	c    *Client
	name string
	cfg  lockConfig
	keys keys.Lock
	err  error // bad name or options, returned by every call
}

var _ Locker = (*Mutex)(nil)

// Mutex returns the mutex called name. Invalid names or options do not
// panic: every call of the Mutex then fails with ErrInvalid.
func (c *Client) Mutex(name string, opts ...LockOption) *Mutex {
	m := &Mutex{c: c, name: name, cfg: newLockConfig(opts)}
	m.keys, m.err = c.lockKeys(keys.KindMutex, name)
	if m.err == nil {
		m.err = m.cfg.err
	}
	m.owner = owner{rdb: c.rdb, key: m.keys.Key()}
	return m
}

// TryLock takes the mutex if it is free, in one round trip. If another
// lease holds it, TryLock returns ErrNotAcquired and changes nothing.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	if m.err != nil {
		return nil, m.err
	}
	return m.c.acquire(ctx, m.acquisition(), false)
}

// Lock takes the mutex, waiting while it is held: until a release is
// announced, or the holder's lease runs out. It returns an error matching
// both ErrNotAcquired and ctx.Err() when ctx ends first, and one matching
// ErrNotAcquired when WithStallTimeout ran out; either way it leaves the
// mutex unchanged.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	if m.err != nil {
		return nil, m.err
	}
	return m.c.acquire(ctx, m.acquisition(), true)
}

// Do locks the mutex, runs fn, and unlocks. fn's context is cancelled, with
// cause ErrLost (see context.Cause), the moment the lease is lost. Do
// returns fn's error joined with any error from Unlock.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return do(ctx, m.Lock, fn)
}

// Status reports who holds the mutex, for how much longer, and its fence.
func (m *Mutex) Status(ctx context.Context) (Status, error) {
	if m.err != nil {
		return Status{}, m.err
	}
	v, err := mutexStatus.Run(ctx, m.c.rdb, []string{m.keys.Key(), m.keys.Part("fence")}).Slice()
	if err != nil {
		return Status{}, fmt.Errorf("dlock: status of mutex %q: %w", m.name, err)
	}
	if len(v) < 5 {
		return Status{}, fmt.Errorf("dlock: status of mutex %q: unexpected reply %v", m.name, v)
	}
	return ownerStatus(m.name, keys.KindMutex, v), nil
}

func (m *Mutex) acquisition() *acquisition {
	return &acquisition{
		kind:    "mutex",
		name:    m.name,
		cfg:     m.cfg,
		channel: m.keys.Channel(),
		try:     m.try,
		grant: func(tok string, r attempt, sent time.Time) *Lease {
			return newLease(m.name, tok, r.fence, m, m.cfg, sent)
		},
	}
}

func (m *Mutex) try(ctx context.Context, tok string) (attempt, error) {
	v, err := mutexAcquire.Run(ctx, m.c.rdb,
		[]string{m.keys.Key(), m.keys.Part("fence")},
		tok, millis(m.cfg.ttl), m.cfg.metadata).Slice()
	if err != nil {
		return attempt{}, err
	}
	return parseAttempt(v)
}

func (m *Mutex) release(ctx context.Context, tok string) (bool, error) {
	return mutexRelease.Run(ctx, m.c.rdb, []string{m.keys.Key()},
		tok, m.c.hub.PublishCommand(), m.keys.Channel()).Bool()
}
