package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseGrace is how long Do waits for its release once the caller's
// context has ended (by the time fn returns): enough for Redis to answer,
// so that the lock is free when Do returns, as when ctx lives; a release
// not answered by then goes on in the background.
const releaseGrace = 500 * time.Millisecond

// errNoFunc is what Do returns for a nil fn, before taking anything.
var errNoFunc = fmt.Errorf("%w: Do needs a function to run", ErrInvalid)

// do is Do for every primitive: lock, run fn under a context cancelled with
// cause ErrLost when the lease is lost, unlock (also when fn panics: the
// panic goes on once the lease is released).
func do(ctx context.Context, lock func(context.Context) (*Lease, error), fn func(context.Context) error) (err error) {
	if fn == nil {
		return errNoFunc
	}
	l, err := lock(ctx)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-l.Lost():
			cancel(ErrLost)
		case <-fctx.Done():
		}
	}()
	returned := false
	defer func() {
		cancel(nil)
		<-watched
		uerr := releaseAfterDo(ctx, l)
		if returned {
			err = errors.Join(err, uerr)
		}
	}()
	err = fn(fctx)
	returned = true
	return err
}

// releaseAfterDo unlocks l, Do's lease, giving the release until
// releaseGrace past ctx's end, whether ctx ended before fn returned or
// while the release waited for Redis: either way a release cut short goes
// on in the background, as Unlock's does.
func releaseAfterDo(ctx context.Context, l *Lease) error {
	var uctx context.Context
	var cancel context.CancelFunc
	if dl, ok := ctx.Deadline(); ok {
		// Kept as a deadline, for a go-redis client that honours it; a
		// deadline already past (fn overran it) gives the grace from now.
		if now := time.Now(); dl.Before(now) {
			dl = now
		}
		uctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl.Add(releaseGrace))
	} else {
		uctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	defer cancel()
	returned := make(chan struct{})
	defer close(returned)
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(releaseGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-returned:
		}
	})
	defer stop()
	return l.Unlock(uctx)
}
