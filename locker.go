package dlock

import "context"

// Locker is what every exclusive lock offers: *Mutex, *FairMutex and the
// write side of *RWMutex implement it, and RWMutex.RLocker returns its read
// side as one.
type Locker interface {
	// TryLock takes the lock if it is free, without waiting; otherwise it
	// returns ErrNotAcquired.
	TryLock(ctx context.Context) (*Lease, error)
	// Lock takes the lock, waiting until it is free or ctx ends.
	Lock(ctx context.Context) (*Lease, error)
	// Do runs fn while holding the lock; fn's context is cancelled with
	// cause ErrLost if the lease is lost.
	Do(ctx context.Context, fn func(ctx context.Context) error) error
}
