package dlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Hooks are functions a client calls as its locks work, so that a
// program can measure them: how long callers wait, how long holders hold,
// which leases are lost and why, how many wait now. The module
// github.com/go-dlock/dlock/dlockotel implements them with OpenTelemetry
// metrics and spans. Set them with WithHooks; any field may be nil.
//
// Hooks run synchronously in the goroutine doing the work: the caller's
// for an acquisition or a release; the client's renewal goroutines for
// renewals, a Refresh's included (its RenewEnd comes after Refresh
// returned when the caller's ctx ended first, whenever Redis answers,
// perhaps after later hooks of the lease); and LeaseEnd wherever the holding
// ends: in Unlock, or for a loss in the client's renewal loop, where a
// slow hook delays the renewals of all the client's leases. They must be
// quick, must not block and must not call the client. A context a Start
// hook returns is the one passed to the matching End hook; the Redis
// calls of an acquisition, a release and a renewal sent alone run with it
// too (with the renewal's own deadline), so a span it carries is the
// parent of go-redis' own. A lease keeps the values of its acquisition's
// context (not its cancellation) for the hooks of its automatic renewals
// and its end.
//
// For each lease, AcquireEnd comes before LeaseEnd. Every AcquireStart is
// followed by one AcquireEnd, every WaitStart by one WaitEnd, and every
// lease acquired by one LeaseEnd. A lease that never expires and whose
// failed Unlock is still being released in the background when its
// client closes ends then, lost (unreachable): nothing will release it
// but another Unlock, which Redis still holds it for (its Lost() stays
// open, and that Unlock returns nil when it gets through).
type Hooks struct {
	// AcquireStart is called when an acquisition starts: TryLock, Lock,
	// TryRLock, RLock, the MutexSet's and Semaphore's Acquire forms,
	// Campaign and TryCampaign, and the Do of each.
	AcquireStart func(ctx context.Context, lk LockInfo) context.Context
	// AcquireEnd is called when it returns, with its outcome.
	AcquireEnd func(ctx context.Context, lk LockInfo, r AcquireResult)
	// WaitStart is called when a blocking acquisition starts to wait: its
	// first try did not take the lock. WaitEnd is called when it stops
	// waiting, just before AcquireEnd.
	WaitStart func(ctx context.Context, lk LockInfo) context.Context
	WaitEnd   func(ctx context.Context, lk LockInfo)
	// ReleaseStart and ReleaseEnd bracket a lease's Unlock (or Resign),
	// with the error it returns.
	ReleaseStart func(ctx context.Context, l LeaseInfo) context.Context
	ReleaseEnd   func(ctx context.Context, l LeaseInfo, err error)
	// RenewStart and RenewEnd bracket each renewal of a lease sent to
	// Redis. An automatic renewal (auto is true) runs under the context
	// the lease was acquired with, without its cancellation; a Refresh
	// under its caller's. The error is nil when renewed; it wraps ErrLost
	// when Redis said the lease is gone, and context.Canceled when the
	// renewal was in flight as the lease's release was sent, and found it
	// released.
	RenewStart func(ctx context.Context, l LeaseInfo, auto bool) context.Context
	RenewEnd   func(ctx context.Context, l LeaseInfo, err error)
	// LeaseEnd is called once per lease, under the context it was
	// acquired with, when its holding ends: released (lost is ""), or
	// lost, with the reason. held is the time since it was acquired.
	LeaseEnd func(ctx context.Context, l LeaseInfo, held time.Duration, lost LostReason)
}

// WithHooks sets the functions the client calls as its locks work (see
// Hooks). Without it the client calls none and pays nothing for them.
func WithHooks(h Hooks) Option {
	return func(c *clientConfig) { c.hooks = &h }
}

// LockInfo names the lock a hook is called for.
type LockInfo struct {
	// Kind is the lock's kind as Status.Kind gives it: "mutex", "fair",
	// "rw", "set", "semaphore" or "election". A Redlock Mutex is "mutex".
	Kind string
	// Name is the lock's name; for a MutexSet, the set's.
	Name string
	// Shared is true for the read side of an RWMutex.
	Shared bool
}

// LeaseInfo is the lease a hook is called for.
type LeaseInfo struct {
	LockInfo
	// Member is the MutexSet member the lease holds, "" for other kinds.
	Member string
	// Fence is the lease's fencing token.
	Fence uint64
}

// AcquireResult is how an acquisition ended.
type AcquireResult struct {
	Outcome Outcome
	// Wait is the time from AcquireStart.
	Wait time.Duration
	// Lease is the lease acquired, when Outcome is Acquired.
	Lease LeaseInfo
	// Err is the error returned, nil when acquired.
	Err error
}

// Outcome is how an acquisition ended.
type Outcome string

// The outcomes of an acquisition.
const (
	// Acquired: the lease was granted.
	Acquired Outcome = "acquired"
	// NotAcquired: the lock was taken (a Try form), or the stall timeout
	// passed.
	NotAcquired Outcome = "not_acquired"
	// Canceled: the caller's context ended first; the error tells what
	// the last try met, if anything (Redis unreachable, say).
	Canceled Outcome = "canceled"
	// Failed: any other error, such as Redis unreachable, a refusal, or a
	// bad argument.
	Failed Outcome = "error"
)

// outcome classifies the error of an acquisition.
func outcome(err error) Outcome {
	switch {
	case err == nil:
		return Acquired
	case errors.Is(err, ErrNotAcquired) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return Canceled
	case errors.Is(err, ErrNotAcquired):
		return NotAcquired
	}
	return Failed
}

// LostReason is why a lease was lost.
type LostReason string

// The reasons a lease is lost.
const (
	// LostGone: Redis said the lease is no longer the holder's. It was
	// removed (ForceUnlock, FLUSHALL, eviction, a failover that lost the
	// write) or expired there while the holder could not renew it.
	LostGone LostReason = "gone"
	// LostUnreachable: the lease's deadline passed while a renewal (or an
	// Unlock) went unconfirmed: Redis was unreachable, slow, or refused.
	LostUnreachable LostReason = "unreachable"
	// LostExpired: the lease's deadline passed with no renewal sent:
	// WithAutoRefresh(false), or the holder's process stalled.
	LostExpired LostReason = "expired"
)

// hooked is what the hooks of one lease need; a lease has one only when
// its client has hooks.
type hooked struct {
	h *Hooks
	// ctx is the acquisition's context without its cancellation, for the
	// hooks called from the renewal loop.
	ctx   context.Context
	info  LeaseInfo
	since time.Time
	ended sync.Once // the holding ended

	mu sync.Mutex
	// announced is set once AcquireEnd has been called; early holds an
	// end that came before, for LeaseEnd after it.
	announced bool
	early     func()
}

func (h *Hooks) acquireStart(ctx context.Context, lk LockInfo) context.Context {
	if h.AcquireStart == nil {
		return ctx
	}
	return h.AcquireStart(ctx, lk)
}

func (h *Hooks) acquireEnd(ctx context.Context, lk LockInfo, l *Lease, err error, wait time.Duration) {
	if h.AcquireEnd == nil {
		return
	}
	r := AcquireResult{Outcome: outcome(err), Wait: wait, Err: err}
	if l != nil {
		r.Lease = l.hooked.info
	}
	h.AcquireEnd(ctx, lk, r)
}

func (h *Hooks) waitStart(ctx context.Context, lk LockInfo) context.Context {
	if h.WaitStart == nil {
		return ctx
	}
	return h.WaitStart(ctx, lk)
}

func (h *Hooks) waitEnd(ctx context.Context, lk LockInfo) {
	if h.WaitEnd != nil {
		h.WaitEnd(ctx, lk)
	}
}

func (o *hooked) releaseStart(ctx context.Context) context.Context {
	if o.h.ReleaseStart == nil {
		return ctx
	}
	return o.h.ReleaseStart(ctx, o.info)
}

func (o *hooked) releaseEnd(ctx context.Context, err error) {
	if o.h.ReleaseEnd != nil {
		o.h.ReleaseEnd(ctx, o.info, err)
	}
}

// renewStart starts the hooks of a renewal sent under ctx and returns
// the context for renewEnd.
func (o *hooked) renewStart(ctx context.Context, auto bool) context.Context {
	if auto {
		ctx = o.ctx
	}
	if o.h.RenewStart == nil {
		return ctx
	}
	return o.h.RenewStart(ctx, o.info, auto)
}

func (o *hooked) renewEnd(ctx context.Context, err error) {
	if o.h.RenewEnd == nil {
		return
	}
	if errors.Is(err, errGone) {
		err = ErrLost
	}
	o.h.RenewEnd(ctx, o.info, err)
}

// end calls LeaseEnd, once, for a holding that ended now (lost for
// reason, or released when reason is ""): at once, or after AcquireEnd if
// that has not been called yet.
func (o *hooked) end(reason LostReason) {
	o.ended.Do(func() {
		if o.h.LeaseEnd == nil {
			return
		}
		held := time.Since(o.since)
		call := func() { o.h.LeaseEnd(o.ctx, o.info, held, reason) }
		o.mu.Lock()
		if !o.announced {
			o.early = call
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		call()
	})
}

// acquired follows AcquireEnd: an end that came before it is reported
// now.
func (o *hooked) acquired() {
	o.mu.Lock()
	o.announced = true
	early := o.early
	o.mu.Unlock()
	if early != nil {
		early()
	}
}
