package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// ttl is the lease time of every lock in the benchmark, for every library.
const ttl = 10 * time.Second

// retryDelay is how long the polling peers sleep between tries.
const retryDelay = 10 * time.Millisecond

// errBusy is what TryLock returns when the lock is held.
var errBusy = errors.New("lock is held")

// unlockFunc releases what a Lock or TryLock took.
type unlockFunc func(ctx context.Context) error

// locker is one library's lock on one key, as the scenarios use it. Lock
// waits until it has the lock or ctx ends; TryLock returns errBusy at once
// if the lock is held. Both are safe for concurrent use.
type locker interface {
	Lock(ctx context.Context) (unlockFunc, error)
	TryLock(ctx context.Context) (unlockFunc, error)
}

// peer is one library (or one dlock primitive) under test.
type peer struct {
	name     string
	settings string // every setting, written into the report
	// blocking is false for the protocol floor, which cannot wait.
	blocking bool
	// open binds the peer to one go-redis client and returns how to make a
	// locker on a key, and how to let go of what open made.
	open func(rdb *redis.Client) (mk func(key string) (locker, error), closer func())
}

// peers lists everything measured, in report order.
func peers() []peer {
	return []peer{
		dlockMutex(), dlockFair(), dlockRW(), dlockSet(),
		redsyncPeer(), redislockPeer(), floorPeer(),
	}
}

func peerByName(name string) (peer, bool) {
	for _, p := range peers() {
		if p.name == name {
			return p, true
		}
	}
	return peer{}, false
}
