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

// Renew sends the renewals in one pipeline and reads each reply. Those
// whose script Redis lacks (after a restart, or the first time) go again
// in a second pipeline once the scripts are loaded.
func (b *renewBatch) Renew(ctx context.Context, rs []watchdog.Renewal) []error {
	calls := make([]scriptCall, len(rs))
	for i, r := range rs {
		l := r.Lease.(leaseRenewal)
		calls[i] = l.ops.renewal(l.token, r.TTL)
	}
	cmds := b.send(ctx, calls)
	var missing []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		b.resend(ctx, calls, cmds, missing)
	}
	errs := make([]error, len(rs))
	for i, cmd := range cmds {
		errs[i] = renewed(cmd.Bool())
	}
	return errs
}

// send runs calls as EVALSHA in one pipeline and returns their commands,
// each with its own reply or error.
func (b *renewBatch) send(ctx context.Context, calls []scriptCall) []*redis.Cmd {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.s.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// resend loads the scripts of the calls at missing, which Redis lacked,
// and sends those calls again in one pipeline, replacing their commands.
func (b *renewBatch) resend(ctx context.Context, calls []scriptCall, cmds []*redis.Cmd, missing []int) {
	again := make([]scriptCall, len(missing))
	loaded := map[*redis.Script]bool{}
	for j, i := range missing {
		again[j] = calls[i]
		if s := calls[i].s; !loaded[s] {
			loaded[s] = true
			if err := s.Load(ctx, b.rdb).Err(); err != nil {
				return // the first replies stand: NOSCRIPT, retried as failures
			}
		}
	}
	for j, cmd := range b.send(ctx, again) {
		cmds[missing[j]] = cmd
	}
}
