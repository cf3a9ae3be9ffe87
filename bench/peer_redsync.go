package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncTries is WithTries: enough tries at retryDelay apart that Lock
// waits as long as any run lasts, as a blocking lock should.
const redsyncTries = 1_000_000

func redsyncPeer() peer {
	return peer{
		name: "redsync",
		settings: fmt.Sprintf("redsync/v4 v4.18.1, one pool (goredis/v9 adapter): WithExpiry(%v), "+
			"WithTries(%d), WithRetryDelay(%v); defaults for the rest (drift factor 0.01, "+
			"timeout factor 0.05); a new redsync.Mutex per Lock call (a Mutex keeps its value)",
			ttl, redsyncTries, retryDelay),
		blocking: true,
		open: func(rdb *redis.Client) (func(string) (locker, error), func()) {
			rs := redsync.New(goredis.NewPool(rdb))
			return func(key string) (locker, error) { return redsyncLock{rs, key}, nil }, func() {}
		},
	}
}

type redsyncLock struct {
	rs  *redsync.Redsync
	key string
}

func (r redsyncLock) Lock(ctx context.Context) (unlockFunc, error) {
	m := r.rs.NewMutex(r.key, redsync.WithExpiry(ttl), redsync.WithTries(redsyncTries),
		redsync.WithRetryDelay(retryDelay))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncUnlock(m), nil
}

func (r redsyncLock) TryLock(ctx context.Context) (unlockFunc, error) {
	m := r.rs.NewMutex(r.key, redsync.WithExpiry(ttl))
	err := m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return redsyncUnlock(m), nil
}

func redsyncUnlock(m *redsync.Mutex) unlockFunc {
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock found the lock not ours")
		}
		return err
	}
}
