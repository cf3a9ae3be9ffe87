package dlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/watchdog"
)

// scriptCall is one run of a script: which, on which keys, with which
// arguments; sent alone (run) or queued in a pipeline with others.
type scriptCall struct {
	s    *redis.Script
	keys []string
	args []any
}

// run sends the call alone, loading the script if Redis lacks it.
func (c scriptCall) run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	return c.s.Run(ctx, rdb, c.keys, c.args...)
}

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
// due together (see watchdog.Batch): one pipeline, which go-redis splits
// by shard on a Cluster, so one round trip per shard. Its leases are
// leaseRenewals.
type renewBatch struct {
	rdb redis.UniversalClient
}

// leaseRenewal is a lease as its renewBatch sees it.
type leaseRenewal struct {
	ops   batchable
	token string
}

// Renew sends the renewals in one pipeline and reads each reply; one
// whose script Redis had lost (after a restart) is sent again alone.
func (b *renewBatch) Renew(ctx context.Context, rs []watchdog.Renewal) []error {
	calls := make([]scriptCall, len(rs))
	cmds := make([]*redis.Cmd, len(rs))
	pipe := b.rdb.Pipeline()
	for i, r := range rs {
		l := r.Lease.(leaseRenewal)
		calls[i] = l.ops.renewal(l.token, r.TTL)
		cmds[i] = calls[i].s.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	errs := make([]error, len(rs))
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			cmd = calls[i].run(ctx, b.rdb)
		}
		errs[i] = renewed(cmd.Bool())
	}
	return errs
}
