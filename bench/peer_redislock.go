package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

func redislockPeer() peer {
	return peer{
		name: "redislock",
		settings: fmt.Sprintf("bsm/redislock v0.9.4: Obtain with ttl %v, RetryStrategy "+
			"LinearBackoff(%v) for Lock, NoRetry (default) for TryLock; Lock's ctx carries a "+
			"deadline (the run's end), as its docs advise, else Obtain stops at the TTL", ttl, retryDelay),
		blocking: true,
		open: func(rdb *redis.Client) (func(string) (locker, error), func()) {
			c := redislock.New(rdb)
			return func(key string) (locker, error) { return redislockLock{c, key}, nil }, func() {}
		},
	}
}

type redislockLock struct {
	c   *redislock.Client
	key string
}

func (r redislockLock) Lock(ctx context.Context) (unlockFunc, error) {
	l, err := r.c.Obtain(ctx, r.key, ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(retryDelay)})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (r redislockLock) TryLock(ctx context.Context) (unlockFunc, error) {
	l, err := r.c.Obtain(ctx, r.key, ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
