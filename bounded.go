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
	v, _, err := boundedTracked(ctx, c, op, nil)
	return v, err
}

// boundedTracked is bounded for requests whose effect must be reckoned
// with when they are abandoned (an acquire that Redis may still apply):
// finished, when not nil, closes once the abandoned op has returned, after
// which go-redis has sent all it will send for it. With stop (a waiter's:
// the client's Close), it returns errClosedClient as soon as stop closes,
// as for ctx's end.
func boundedTracked[T any](ctx context.Context, c *Client, op func(context.Context) (T, error), stop <-chan struct{}) (v T, finished <-chan struct{}, err error) {
	if (stop == nil || ctx.Done() != nil) && selfBounded(ctx, c.rdb) {
		v, err = op(ctx)
		return v, nil, err
	}
	return untilDone(ctx, c.work, op, nil, stop)
}

// untilDone runs op on one of w's workers (on a goroutine of its own if w
// is nil) and returns its result, or ctx's error as soon as ctx ends
// (errClosedClient as soon as stop closes, if not nil). finished, when
// not nil, closes once the abandoned op has returned. When ctx ended
// before a worker took op, op never runs, and the error matches both
// ctx's and errNotSent. discard, if set, is given what an abandoned op
// returned, for a result that must be undone (a registered waiter).
func untilDone[T any](ctx context.Context, w *workers, op func(context.Context) (T, error), discard func(T), stop <-chan struct{}) (v T, finished <-chan struct{}, err error) {
	c := &handed[T]{ctx: ctx, op: op, discard: discard, done: make(chan struct{})}
	if !w.start(ctx, c.run) {
		var zero T
		return zero, nil, fmt.Errorf("%w (%w: every worker busy)", ctx.Err(), errNotSent)
	}
	err = errClosedClient
	select {
	case <-c.done:
		return c.v, nil, c.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
	}
	if !c.state.CompareAndSwap(callPending, callAbandoned) {
		<-c.done // it finished as ctx ended: keep its answer
		return c.v, nil, c.err
	}
	var zero T
	return zero, c.done, err
}

// handed is a call untilDone hands to a worker, in one allocation: a
// burst of ten thousand waiters keeps one per waiter while they queue for
// the workers, and whatever they keep then is interleaved in the heap
// with what the waiters keep for good, so that it leaves gaps behind.
// Whoever moves state from callPending first decides: op's worker
// delivers the result (v and err, read once done closes), or the caller
// abandons it.
type handed[T any] struct {
	ctx     context.Context
	op      func(context.Context) (T, error)
	discard func(T)
	done    chan struct{} // closed once op has returned
	state   atomic.Int32
	v       T
	err     error
}

// States of a handed call.
const (
	callPending   = 0
	callDelivered = 1
	callAbandoned = 2
)

// run is the worker's part: it runs op and delivers or discards what it
// returned.
func (c *handed[T]) run() {
	v, err := c.op(c.ctx)
	if c.state.CompareAndSwap(callPending, callDelivered) {
		c.v, c.err = v, err
	} else if c.discard != nil {
		c.discard(v)
	}
	close(c.done)
}

// errNotSent marks a call Redis never saw: its ctx ended while it waited
// for a worker, its lease's turn to release, or a pipeline (see
// pipeliner), or it waited for a pipeline too long.
var errNotSent = errors.New("not sent")

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

// scripter is where a call sends its scripts: through the client's
// pipeliner, but for a ctx whose deadline go-redis honours (see
// selfBounded), which goes straight to rdb: the pipeline it may wait for
// is sent by another caller, with no deadline.
func (c *Client) scripter(ctx context.Context) redis.Scripter {
	if !c.pipelines(ctx) {
		return c.rdb
	}
	return c.pipe.scripter
}

// scripterOnce is scripter for scripts sent once (see once).
func (c *Client) scripterOnce(ctx context.Context) redis.Scripter {
	if !c.pipelines(ctx) {
		return once{c.rdb}
	}
	return c.pipeOnce.scripter
}

// pipelines reports whether a call with ctx goes through c's pipeliners.
func (c *Client) pipelines(ctx context.Context) bool {
	return c.pipe != nil && (ctx.Done() == nil || !selfBounded(ctx, c.rdb))
}

// eval runs script s on c's Redis through bounded and reads its reply
// with read: (*redis.Cmd).Slice, (*redis.Cmd).Int...
func eval[T any](ctx context.Context, c *Client, s *redis.Script, read func(*redis.Cmd) (T, error), keys []string, args ...any) (T, error) {
	return bounded(ctx, c, func(ctx context.Context) (T, error) { return read(s.Run(ctx, c.scripter(ctx), keys, args...)) })
}
