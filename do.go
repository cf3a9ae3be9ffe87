package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// unlockTimeout bounds the release that Do leaves to the background when
// the caller's context has ended by the time fn returns.
const unlockTimeout = 5 * time.Second

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

// releaseAfterDo unlocks l, Do's lease, by ctx while ctx lives (a release
// that ctx cuts short goes on in the background, as Unlock's does), and in
// the background once ctx has ended, so that Do returns by ctx's deadline.
func releaseAfterDo(ctx context.Context, l *Lease) error {
	if ctx.Err() == nil {
		return l.Unlock(ctx)
	}
	unlock := func(ctx context.Context) {
		uctx, cancel := context.WithTimeout(ctx, unlockTimeout)
		defer cancel()
		_ = l.Unlock(uctx)
	}
	if !l.c.giveUps.do(l.name, unlock) {
		unlock(context.Background()) // a closed client: as Unlock would do
	}
	return nil
}
