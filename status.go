package dlock

import "time"

// Status describes a lock as Redis has it at one moment.
type Status struct {
	Name string // the lock's name
	Kind string // "mutex", "fair", "rw", "set", "semaphore" or "election"
	Held bool   // someone holds it now
	// Metadata is the holder's WithMetadata text.
	Metadata string
	// TTL is the holder's remaining lease time; -1 if it never expires,
	// 0 if the lock is free.
	TTL time.Duration
	// Since is when the holder acquired the lock, by Redis' clock; zero if
	// the lock is free.
	Since time.Time
	// Fence is the holder's fence, or when free the lock's last fence if
	// Redis still remembers it (0 otherwise): at least the last one
	// issued, since a try refused while the lock was held may have moved
	// it (fences only have to rise).
	Fence uint64
	// Waiters are the live callers queued for a Mutex, FairMutex,
	// MutexSet or Semaphore, or the writers waiting for an RWMutex, first
	// first.
	Waiters []Waiter
	// Readers are the live read shares of an RWMutex, oldest first. For an
	// RWMutex, Held is true while a writer or any reader holds it, and
	// Metadata, TTL, Since and Fence describe the writer; with readers only
	// (or none), Fence is the last fence issued.
	Readers []Holder
	// WriterWaiting reports that a writer waits for an RWMutex under
	// PreferWriters: new PreferWriters readers wait behind it.
	WriterWaiting bool
	// Members and Free count a MutexSet's members, and those free now.
	Members, Free int
	// Size is a Semaphore's size: for Semaphore.Status the caller's own,
	// for Client.Inspect and Client.List the size the latest acquisition
	// asked under (0 once nothing is held). InUse is the permits its live
	// leases hold.
	Size, InUse int64
	// Holders are a Semaphore's live leases, oldest first. For a
	// Semaphore, Held is true while any lease holds permits, TTL is the
	// time until the first lease runs out (-1 if none ever does), and
	// Fence is the last fence issued.
	Holders []Holder
	// Value is an Election's leader's value, from Campaign or its last
	// Proclaim; "" while nobody leads. For an Election, Fence is the term
	// and Metadata the leader's WithMetadata text.
	Value string
}

// Holder is one lease of a lock that many may hold at once (a reader of an
// RWMutex, a lease of a Semaphore).
type Holder struct {
	Metadata string        // the holder's WithMetadata text
	TTL      time.Duration // remaining lease time; -1 if it never expires
	Since    time.Time     // when it acquired the lock, by Redis' clock
	Fence    uint64        // its fence
	Permits  int64         // the permits it holds: 1 for a reader
}

// Waiter is one caller queued for a lock (see Status.Waiters).
type Waiter struct {
	Metadata string    // the waiter's WithMetadata text
	Since    time.Time // when it joined the queue, by Redis' clock
	// Member is the MutexSet member it waits for; "" for any member, and
	// for the other locks.
	Member string
	// Permits is what it waits for: a Semaphore's permits, 1 for the other
	// locks.
	Permits int64
}
