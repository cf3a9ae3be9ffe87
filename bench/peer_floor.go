package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/redis/go-redis/v9"
)

// floorRelease deletes the key only if it still holds our token.
var floorRelease = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0`)

// floorPeer is the protocol floor: SET NX PX to take, a compare-and-delete
// script to release. Two round trips, no waiting, no renewal.
func floorPeer() peer {
	return peer{
		name:     "floor",
		settings: "SET key token NX PX 10000, then EVALSHA of a GET-compare-DEL script; 2 round trips, no waiting logic, no renewal",
		open: func(rdb *redis.Client) (func(string) (locker, error), func()) {
			return func(key string) (locker, error) { return floorLock{rdb, key}, nil }, func() {}
		},
	}
}

type floorLock struct {
	rdb *redis.Client
	key string
}

// Lock is TryLock: the floor has no waiting logic.
func (f floorLock) Lock(ctx context.Context) (unlockFunc, error) { return f.TryLock(ctx) }

func (f floorLock) TryLock(ctx context.Context) (unlockFunc, error) {
	var b [16]byte
	rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	err := f.rdb.Do(ctx, "SET", f.key, tok, "NX", "PX", ttl.Milliseconds()).Err()
	if errors.Is(err, redis.Nil) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		n, err := floorRelease.Run(ctx, f.rdb, []string{f.key}, tok).Int()
		if err == nil && n == 0 {
			err = errors.New("floor: the lock was no longer ours")
		}
		return err
	}, nil
}

// pingPeer is a diagnostic for scenario 1 only: two PINGs in place of a
// lock and an unlock, the network and client floor under the protocol.
func pingPeer() peer {
	return peer{
		name:     "2 × PING (diagnostic)",
		settings: "PING in place of the lock, PING in place of the unlock: round trips only",
		open: func(rdb *redis.Client) (func(string) (locker, error), func()) {
			return func(string) (locker, error) { return pingLock{rdb}, nil }, func() {}
		},
	}
}

type pingLock struct{ rdb *redis.Client }

func (p pingLock) Lock(ctx context.Context) (unlockFunc, error) { return p.TryLock(ctx) }

func (p pingLock) TryLock(ctx context.Context) (unlockFunc, error) {
	if err := p.rdb.Ping(ctx).Err(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return p.rdb.Ping(ctx).Err() }, nil
}
