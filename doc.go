// Package dlock provides locks that processes on many machines share
// through Redis: what sync.Mutex is to goroutines, for a fleet.
//
// A Client binds the locks to one Redis deployment (a single node, a
// Sentinel-managed master or a Redis Cluster); NewRedlock binds a Mutex to
// a majority of independent masters instead. The locks:
//
//   - Mutex: exclusive; a free Mutex may be taken ahead of waiters that
//     have waited under a millisecond, as with sync.Mutex.
//   - FairMutex: exclusive, first come first served across all clients.
//   - RWMutex: many readers or one writer, each reader a lease of its own.
//   - MutexSet: a pool of named members, each an exclusive lock; take any
//     free member (least recently used first) or one by name.
//   - Semaphore: at most N permits held at once; each acquisition a lease
//     of n of them, waiters served first come first served.
//   - Election: one leader at a time, in arrival order, whose value and
//     term everyone can read (Leader) and follow (Observe); the
//     leadership is a lease whose fence is the term.
//
// # Leases
//
// Every successful TryLock, Lock, RLock or Acquire returns a *Lease: one
// holding of the lock, with a secret token, a fence that rises strictly
// per lock, and a TTL that a watchdog renews every TTL/6 to TTL/3 (with
// the client's other leases due about then) until Unlock.
// Lease.Lost is closed, and Do's context cancelled with cause ErrLost, the
// moment the lease is known gone: a renewal found it taken, or Redis could
// not be reached before its TTL, counted from when the last renewal that
// succeeded was sent, less a margin, ran out. That is before Redis could
// hand the lock to anyone else.
//
// # Waiting
//
// A caller that waits joins the lock's waiters in Redis and listens on its
// Client's channel of the lock (so that a hand-off wakes its process
// alone), over one subscription connection per Client. A release
// hands the lock to the waiters it can let in (for a Mutex or FairMutex
// exactly one, the first in line; for a Semaphore each waiter in turn
// whose permits fit; for an Election the first campaigner) with the
// message that wakes each, so a hand-off
// costs one message. Waiters
// also wake when the holder's lease would run out, and back off through
// transient errors until their ctx ends.
//
// # Failures
//
// Every call returns by its ctx deadline. An acquisition that fails leaves
// nothing in Redis: what a try whose reply was lost may have taken is given
// up at once, and again in the background while Redis cannot be reached.
// A reply that comes after the lease's deadline is not handed out as a
// lease. Errors match ErrNotAcquired, ErrLost, ErrInvalid, ErrNoMember,
// ErrNoLeader or ErrUnsupported with errors.Is; bad names and options
// never panic.
//
// # Observability
//
// WithHooks sets functions the client calls as its locks work: each
// acquisition's start and outcome with its wait, waits, releases,
// renewals, and each lease's end with its hold time and, if lost, why
// (see Hooks). The module github.com/go-dlock/dlock/dlockotel implements
// them with OpenTelemetry metrics and spans. Without hooks nothing is
// called.
//
// # Redis
//
// Each operation is one Lua script (EVALSHA), one round trip. Expiry,
// fences and "held since" use Redis' clock. The scripts, their keys and
// the ACL rules a least-privileged user needs are in the README, with the
// guarantees, their limits, and how each call reaches its script.
package dlock
