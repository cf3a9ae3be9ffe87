package dlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// bounded runs op, an exchange with Redis, and returns its result, or
// ctx's error as soon as ctx ends. go-redis waits for a reply until its own
// ReadTimeout (3s by default) unless the caller's client was built with
// ContextTimeoutEnabled, which dlock does not control; every public call
// goes through here so that it returns by its ctx deadline whatever the
// client's options. An abandoned op finishes in the background.
func bounded[T any](ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	v, _, err := boundedTracked(ctx, op)
	return v, err
}

// boundedTracked is bounded for requests whose effect must be reckoned
// with when they are abandoned (an acquire that Redis may still apply):
// finished, when not nil, closes once the abandoned op has returned, after
// which go-redis has sent all it will send for it.
func boundedTracked[T any](ctx context.Context, op func(context.Context) (T, error)) (v T, finished <-chan struct{}, err error) {
	if ctx.Done() == nil {
		// A context that never ends has no deadline to honour.
		v, err = op(ctx)
		return v, nil, err
	}
	type result struct {
		v   T
		err error
	}
	out := make(chan result, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err := op(ctx)
		out <- result{v, err}
	}()
	select {
	case r := <-out:
		return r.v, nil, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-out: // it finished as ctx ended: keep its answer
		return r.v, nil, r.err
	default:
	}
	var zero T
	return zero, done, ctx.Err()
}

// eval runs script s through bounded and reads its reply with read:
// (*redis.Cmd).Slice, (*redis.Cmd).Int...
func eval[T any](ctx context.Context, rdb redis.Scripter, s *redis.Script, read func(*redis.Cmd) (T, error), keys []string, args ...any) (T, error) {
	return bounded(ctx, func(ctx context.Context) (T, error) { return read(s.Run(ctx, rdb, keys, args...)) })
}

// evalErr is eval for scripts whose reply says nothing.
func evalErr(ctx context.Context, rdb redis.Scripter, s *redis.Script, keys []string, args ...any) error {
	_, err := eval(ctx, rdb, s, (*redis.Cmd).Result, keys, args...)
	return err
}
