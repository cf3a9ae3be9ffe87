package main

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
)

// dlockSettings is what every dlock peer runs with: the library defaults.
const dlockSettings = "TTL 10s (default), auto-refresh on (default, every TTL/3); " +
	"one dlock.Client per process, shared by its goroutines (one subscription connection); " +
	"waiting woken by pub/sub, no retry setting exists"

// dlockLock adapts any dlock lock call.
type dlockLock struct {
	lock, try func(context.Context) (*dlock.Lease, error)
}

func (d dlockLock) Lock(ctx context.Context) (unlockFunc, error) {
	return leaseUnlock(d.lock(ctx))
}

func (d dlockLock) TryLock(ctx context.Context) (unlockFunc, error) {
	l, err := d.try(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) {
		return nil, errBusy
	}
	return leaseUnlock(l, err)
}

func leaseUnlock(l *dlock.Lease, err error) (unlockFunc, error) {
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

// dlockPeer makes a peer of one dlock primitive.
func dlockPeer(name, extra string, mk func(c *dlock.Client, key string) (locker, error)) peer {
	settings := dlockSettings
	if extra != "" {
		settings += "; " + extra
	}
	return peer{
		name:     name,
		settings: settings,
		blocking: true,
		open: func(rdb *redis.Client) (func(string) (locker, error), func()) {
			c := dlock.New(rdb)
			return func(key string) (locker, error) { return mk(c, key) }, func() { c.Close() }
		},
	}
}

func dlockMutex() peer {
	return dlockPeer("dlock Mutex", "", func(c *dlock.Client, key string) (locker, error) {
		m := c.Mutex(key)
		return dlockLock{m.Lock, m.TryLock}, nil
	})
}

func dlockFair() peer {
	return dlockPeer("dlock FairMutex", "", func(c *dlock.Client, key string) (locker, error) {
		m := c.FairMutex(key)
		return dlockLock{m.Lock, m.TryLock}, nil
	})
}

func dlockRW() peer {
	return dlockPeer("dlock RWMutex (write)", "write side, PreferWriters (default)",
		func(c *dlock.Client, key string) (locker, error) {
			m := c.RWMutex(key)
			return dlockLock{m.Lock, m.TryLock}, nil
		})
}

// dlockRWRead is scenario 1's read side of an RWMutex: its scripts are
// not the write side's, so their cost is measured too.
func dlockRWRead() peer {
	return dlockPeer("dlock RWMutex (read)", "read side, PreferWriters (default)",
		func(c *dlock.Client, key string) (locker, error) {
			m := c.RWMutex(key)
			return dlockLock{m.RLock, m.TryRLock}, nil
		})
}

// setMember is the one member of every MutexSet in the benchmark.
const setMember = "m"

func dlockSet() peer {
	return dlockPeer("dlock MutexSet", "a set of 1 member, Acquire/TryAcquire (any member)",
		func(c *dlock.Client, key string) (locker, error) {
			s := c.MutexSet(key)
			if err := s.Add(context.Background(), setMember); err != nil {
				return nil, err
			}
			return dlockLock{s.Acquire, s.TryAcquire}, nil
		})
}

// dlockSem is scenario 1's Semaphore: one permit of a semaphore of size
// 1, taken as a lock is. Its scripts are not a lock's (a count of
// permits, a lease each), so their cost is measured too; no peer has a
// semaphore, so it is not in the contention runs.
func dlockSem() peer {
	return dlockPeer("dlock Semaphore", "size 1, Acquire/TryAcquire of 1 permit",
		func(c *dlock.Client, key string) (locker, error) {
			s := c.Semaphore(key, 1)
			take := func(try func(context.Context, int64) (*dlock.Lease, error)) func(context.Context) (*dlock.Lease, error) {
				return func(ctx context.Context) (*dlock.Lease, error) { return try(ctx, 1) }
			}
			return dlockLock{take(s.Acquire), take(s.TryAcquire)}, nil
		})
}

// dlockMutexNoExpiry is a diagnostic for scenario 1 only: a Mutex whose
// lease never expires has no watchdog goroutine to start and stop, so the
// difference to dlock Mutex is what the watchdog costs per lease.
func dlockMutexNoExpiry() peer {
	return dlockPeer("dlock Mutex, WithNoExpiry (diagnostic)", "WithNoExpiry(): no TTL, so no watchdog goroutine per lease",
		func(c *dlock.Client, key string) (locker, error) {
			m := c.Mutex(key, dlock.WithNoExpiry())
			return dlockLock{m.Lock, m.TryLock}, nil
		})
}
