package dlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/watchdog"
)

// batchable is implemented by the lease operations of locks on one
// deployment: their renewal is one script call, which can be sent in a
// batch with the renewals of the client's other leases.
type batchable interface {
	// renewal is the call that extends tok's lease to ttl; it replies 1
	// when extended, 0 when tok no longer holds the lease.
	renewal(tok string, ttl time.Duration) scriptCall
}

// renewed reads a renewal's reply: errGone when the lease is not the
// holder's any more.
func renewed(ok bool, err error) error {
	if err == nil && !ok {
		return errGone
	}
	return err
}

// renewBatch sends the automatic renewals of a client's leases that are
// due together (see watchdog.Batch) in one pipeline: one round trip per
// shard. Its leases are *Lease, whose ops are batchable.
type renewBatch struct {
	rdb redis.UniversalClient
}

// Renew sends the renewals in one batch (see sendAll) and reads each
// reply, calling each lease's renewal hooks around it.
func (b *renewBatch) Renew(ctx context.Context, rs []watchdog.Renewal) []error {
	calls := make([]scriptCall, len(rs))
	var hctx []context.Context // for the leases' RenewEnd, if hooked
	for i, r := range rs {
		l := r.Lease.(*Lease)
		calls[i] = l.ops.(batchable).renewal(l.token, r.TTL)
		if l.hooked != nil {
			if hctx == nil {
				hctx = make([]context.Context, len(rs))
			}
			hctx[i] = l.hooked.renewStart(ctx, true)
		}
	}
	errs := make([]error, len(rs))
	for i, cmd := range sendAll(ctx, b.rdb, calls) {
		errs[i] = renewed(cmd.Bool())
		if l := rs[i].Lease.(*Lease); l.hooked != nil {
			l.hooked.renewEnd(hctx[i], errs[i])
		}
	}
	return errs
}
