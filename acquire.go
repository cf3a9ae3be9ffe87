package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/notify"
	"github.com/go-dlock/dlock/internal/token"
)

// attempt is the outcome of one try script.
type attempt struct {
	ok    bool
	fence uint64 // the new lease's fence, when ok
	// wait is, when held, the time until the holder's lease runs out; a
	// waiter wakes by itself then, so a crashed holder or a lost
	// announcement costs time, never liveness. Negative: it never expires.
	wait time.Duration
	// holder identifies the holding lease (its fence), for the stall
	// timeout.
	holder uint64
	// member is the MutexSet member taken, when ok.
	member string
	// asked marks, on a Redlock client, the nodes that may hold a share.
	asked []bool
}

// acquisition is how one primitive tries to take a lock, for the shared
// try-and-wait loop.
type acquisition struct {
	kind    string // for messages: "mutex", "fair mutex"...
	name    string
	cfg     lockConfig
	channel string // where releases are announced
	// try runs the primitive's try script once for token.
	try func(ctx context.Context, token string) (attempt, error)
	// grant makes the lease of a successful try sent at sent.
	grant func(token string, r attempt, sent time.Time) *Lease
	// leave, if set, withdraws a caller that gives up: its queue entry,
	// and a lease its try took though the reply was lost.
	leave func(ctx context.Context, token string)
	// heartbeat, if set, is the longest a waiter may go without a try:
	// its tries keep its place in a queue alive.
	heartbeat time.Duration
	// patient makes Lock wait out a transient failure of its first try
	// too (Redlock: a majority of nodes may be back soon), not only of
	// later ones.
	patient bool
}

// acquire takes the lock: once if !block, else waiting until it is
// acquired, ctx ends, or the stall timeout passes.
//
// Waiting costs one try per wake-up. A waiter wakes when a release is
// announced (the hub wakes one waiter per client for a plain release),
// when the holder's lease would run out, or after a transient error.
func (c *Client) acquire(ctx context.Context, a *acquisition, block bool) (*Lease, error) {
	tok, err := token.New()
	if err != nil {
		return nil, err
	}
	var w waiter
	if block {
		// Listening already: then this try is the waiter's first.
		w = c.listen.join(a.channel, tok)
	}
	sent := time.Now()
	r, err := a.try(ctx, tok)
	var trouble error
	if block && err != nil && a.patient && ctx.Err() == nil && transient(err) {
		// Wait as for a holder whose lease is about to run out: the loop
		// tries again soon, backing off while the failure lasts.
		trouble, err = err, nil
	}
	if err != nil || r.ok || !block {
		if w != nil {
			w.Close()
		}
		switch {
		case err != nil:
			// The try may have been applied though its reply was lost.
			a.giveUp(tok)
			return nil, a.failed(ctx, err)
		case r.ok:
			return a.grant(tok, r, sent), nil
		}
		return nil, fmt.Errorf("%w: %s %q is not free", ErrNotAcquired, a.kind, a.name)
	}
	retry := w == nil
	if retry {
		w, err = c.listen.subscribe(ctx, a.channel, tok)
		if err != nil {
			a.giveUp(tok)
			if errors.Is(err, notify.ErrClosed) {
				return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			return nil, a.failedAfter(ctx, err, trouble)
		}
	}
	return c.wait(ctx, a, w, tok, r, retry, trouble)
}

// wait is the blocking part of acquire, entered with the subscription
// confirmed after a failed try whose reply is r. If the subscription came
// after that try (retry), a release may have been missed in between, so it
// tries again at once. It closes w, or the waiter that replaced it.
func (c *Client) wait(ctx context.Context, a *acquisition, w waiter, tok string, r attempt, retry bool, trouble error) (*Lease, error) {
	defer func() { w.Close() }()
	holder, stallClock := r.holder, time.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// trouble is the error of the last try when it failed, reported if
	// ctx ends before a try succeeds again.
	var backoff time.Duration
	// woken is set while this waiter owes a try to a wake-up it consumed;
	// if it gives up instead, the wake-up goes to another local waiter.
	woken := false
	quit := func(err error) (*Lease, error) {
		if woken {
			w.Handoff()
		}
		a.giveUp(tok)
		return nil, err
	}
	for {
		var err error
		if retry {
			sent := time.Now()
			r, err = a.try(ctx, tok)
			if err == nil && r.ok {
				return a.grant(tok, r, sent), nil
			}
			if err == nil {
				woken = false
			}
		}
		retry = true
		next := time.Duration(-1) // when to try again unasked; <0: only when woken
		switch {
		case err == nil:
			backoff, trouble = 0, nil
			// 0 is "free, but another waiter is first": not a new holder.
			if r.holder != 0 && r.holder != holder {
				holder, stallClock = r.holder, time.Now()
			}
			if a.cfg.stall > 0 {
				left := a.cfg.stall - time.Since(stallClock)
				if left <= 0 {
					return quit(fmt.Errorf("%w: %s %q kept by the same holder (fence %d) for %v",
						ErrNotAcquired, a.kind, a.name, holder, a.cfg.stall))
				}
				next = left
			}
			if r.wait >= 0 && (next < 0 || r.wait < next) {
				next = r.wait + time.Millisecond
			}
			if a.heartbeat > 0 && (next < 0 || a.heartbeat < next) {
				next = a.heartbeat
			}
		case ctx.Err() == nil && transient(err):
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			next, trouble = backoff, err
			c.log.Debug("dlock: try failed while waiting; retrying", "lock", a.name, "err", err, "in", backoff)
		default:
			return quit(a.failed(ctx, err))
		}

		var expiry <-chan time.Time
		if next >= 0 {
			timer.Reset(next)
			expiry = timer.C
		}
		select {
		case <-w.C():
			woken = true
		case <-expiry:
		case <-ctx.Done():
			return quit(a.failedAfter(ctx, ctx.Err(), trouble))
		case <-w.Done():
			return quit(fmt.Errorf("%w: %w", ErrInvalid, notify.ErrClosed))
		}
		if expiry != nil && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if w.Detached() {
			// The hub gave this subscription up (its cluster shard moved):
			// subscribe again. Until that works, expiry wake-ups remain.
			nw, err := c.listen.subscribe(ctx, a.channel, tok)
			switch {
			case err == nil:
				w.Close()
				w = nw
			case ctx.Err() != nil:
				return quit(a.failed(ctx, ctx.Err()))
			case errors.Is(err, notify.ErrClosed):
				return quit(fmt.Errorf("%w: %w", ErrInvalid, err))
			}
		}
	}
}

// failed wraps an error that ended an acquisition. When ctx ended, both
// ErrNotAcquired and ctx.Err() match the result.
func (a *acquisition) failed(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: waiting for %s %q: %w", ErrNotAcquired, a.kind, a.name, ctxErr)
	}
	return fmt.Errorf("dlock: %s %q: %w", a.kind, a.name, err)
}

// failedAfter is failed, telling what went wrong with the last try, if
// anything: why ctx could end before the lock was had.
func (a *acquisition) failedAfter(ctx context.Context, err, trouble error) error {
	if trouble == nil {
		return a.failed(ctx, err)
	}
	return fmt.Errorf("%w (last try: %v)", a.failed(ctx, err), trouble)
}

// giveUp withdraws a waiter that stops waiting, with its own short
// deadline: the caller's context may be the reason it stops.
func (a *acquisition) giveUp(tok string) {
	if a.leave == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a.leave(ctx, tok)
}

// transient reports whether an error may pass by itself: a network
// failure or a cluster in the middle of a failover, not a refusal, a
// closed client or a reply dlock cannot read.
func transient(err error) bool {
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, errBadReply) || errors.Is(err, ErrNoMember) {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	for _, p := range []string{"LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK"} {
		if strings.HasPrefix(rerr.Error(), p) {
			return true
		}
	}
	return false
}
