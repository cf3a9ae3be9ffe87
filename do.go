package dlock

import (
	"context"
	"errors"
	"time"
)

// unlockTimeout bounds the Unlock that Do runs after fn, which uses a
// context detached from the caller's: the lock must be released even when
// the caller's context has ended.
const unlockTimeout = 5 * time.Second

// do is Do for every primitive: lock, run fn under a context cancelled with
// cause ErrLost when the lease is lost, unlock.
func do(ctx context.Context, lock func(context.Context) (*Lease, error), fn func(context.Context) error) error {
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
	ferr := fn(fctx)
	cancel(nil)
	<-watched
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer ucancel()
	return errors.Join(ferr, l.Unlock(uctx))
}
