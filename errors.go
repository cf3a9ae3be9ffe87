package dlock

import "errors"

// Sentinel errors. Errors returned by dlock wrap one of these where one
// applies; test for them with errors.Is.
var (
	// ErrNotAcquired reports that a lock was held by someone else: at once
	// from TryLock, or when Lock gave up (then ctx.Err() matches too).
	ErrNotAcquired = errors.New("dlock: not acquired")
	// ErrLost reports that a lease is no longer held: it expired, was
	// taken over, or was removed from Redis.
	ErrLost = errors.New("dlock: lease lost")
	// ErrUnsupported reports a primitive the client cannot offer, such as
	// a FairMutex on a Redlock client.
	ErrUnsupported = errors.New("dlock: not supported by this client")
	// ErrNoMember reports a MutexSet member that is not in the set.
	ErrNoMember = errors.New("dlock: no such member")
	// ErrInvalid reports a bad argument or option, or a call on a closed
	// client or a released lease.
	ErrInvalid = errors.New("dlock: invalid argument")
)
