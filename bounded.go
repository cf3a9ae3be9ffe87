package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// bounded runs op, an exchange with c's Redis, and returns its result, or
// ctx's error as soon as ctx ends. go-redis waits for a reply until its
// own ReadTimeout (3s by default) unless the client was built with
// ContextTimeoutEnabled, which dlock does not control; every public call
// goes through here so that it returns by its ctx deadline whatever the
// client's options. Unless the client honours ctx by itself (see
// selfBounded), op runs on one of c's workers, and an abandoned op
// finishes in the background.
func bounded[T any](ctx context.Context, c *Client, op func(context.Context) (T, error)) (T, error) {
	v, _, err := boundedTracked(ctx, c, op)
	return v, err
}

// boundedTracked is bounded for requests whose effect must be reckoned
// with when they are abandoned (an acquire that Redis may still apply):
// finished, when not nil, closes once the abandoned op has returned, after
// which go-redis has sent all it will send for it.
func boundedTracked[T any](ctx context.Context, c *Client, op func(context.Context) (T, error)) (v T, finished <-chan struct{}, err error) {
	if selfBounded(ctx, c.rdb) {
		v, err = op(ctx)
		return v, nil, err
	}
	return untilDone(ctx, c.work, op, nil)
}

// untilDone runs op on one of w's workers (on a goroutine of its own if w
// is nil) and returns its result, or ctx's error as soon as ctx ends.
// finished, when not nil, closes once the abandoned op has returned. When
// ctx ended before a worker took op, op never runs, and the error matches
// both ctx's and errNotSent. discard, if set, is given what an abandoned
// op returned, for a result that must be undone (a registered waiter).
func untilDone[T any](ctx context.Context, w *workers, op func(context.Context) (T, error), discard func(T)) (v T, finished <-chan struct{}, err error) {
	type result struct {
		v   T
		err error
	}
	out := make(chan result, 1)
	done := make(chan struct{})
	// Whoever moves state from pending first decides: op's worker
	// delivers the result, or the caller abandons it.
	const pending, delivered, abandoned = 0, 1, 2
	var state atomic.Int32
	started := w.start(ctx, func() {
		defer close(done)
		v, err := op(ctx)
		if state.CompareAndSwap(pending, delivered) {
			out <- result{v, err}
		} else if discard != nil {
			discard(v)
		}
	})
	if !started {
		var zero T
		return zero, nil, fmt.Errorf("%w (%w)", ctx.Err(), errNotSent)
	}
	select {
	case r := <-out:
		return r.v, nil, r.err
	case <-ctx.Done():
	}
	if !state.CompareAndSwap(pending, abandoned) {
		r := <-out // it finished as ctx ended: keep its answer
		return r.v, nil, r.err
	}
	var zero T
	return zero, done, ctx.Err()
}

// errNotSent marks a call whose ctx ended while it waited for a worker:
// Redis never saw it.
var errNotSent = errors.New("not sent: every worker busy")

// selfBounded reports whether an exchange with rdb returns by ctx's
// deadline without help, sparing the hand-over to a worker that bounded
// otherwise costs: ctx never ends; or it has a deadline and rdb was built
// with ContextTimeoutEnabled, so go-redis dials, writes, reads and backs
// off within that deadline (a ctx cancelled before its deadline is then
// noticed at the deadline, not at once). A nil rdb (a Redlock client's)
// is one whose ops bound themselves: fan-outs.
func selfBounded(ctx context.Context, rdb redis.UniversalClient) bool {
	if ctx.Done() == nil || rdb == nil {
		return true
	}
	if _, ok := ctx.Deadline(); !ok {
		return false
	}
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return r.Options().ContextTimeoutEnabled
	}
	return false
}

// eval runs script s on c's Redis through bounded and reads its reply
// with read: (*redis.Cmd).Slice, (*redis.Cmd).Int...
func eval[T any](ctx context.Context, c *Client, s *redis.Script, read func(*redis.Cmd) (T, error), keys []string, args ...any) (T, error) {
	return bounded(ctx, c, func(ctx context.Context) (T, error) { return read(s.Run(ctx, c.rdb, keys, args...)) })
}
