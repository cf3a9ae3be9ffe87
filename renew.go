package dlock

import (
	"context"
	"sync"
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

var _ watchdog.PartedBatch = (*renewBatch)(nil)

// Renew is RenewParts, its parts' errors gathered.
func (b *renewBatch) Renew(ctx context.Context, rs []watchdog.Renewal) []error {
	errs := make([]error, len(rs))
	var mu sync.Mutex
	b.RenewParts(ctx, rs, func(part []int, perr []error) {
		mu.Lock()
		defer mu.Unlock()
		for j, i := range part {
			errs[i] = perr[j]
		}
	})
	return errs
}

// RenewParts sends the renewals of each master (of a Cluster; on one
// Redis all) in one batch (see sendAll), the masters' at once, and reads
// each reply, calling each lease's renewal hooks around it. A master's
// errors go to done as soon as it has answered: a paused one holds up no
// other's renewals (go-redis answers a Cluster's pipeline once every
// node has).
func (b *renewBatch) RenewParts(ctx context.Context, rs []watchdog.Renewal, done func(part []int, errs []error)) {
	calls := make([]scriptCall, len(rs))
	failed := make([]bool, len(rs))
	for i, r := range rs {
		l := r.Lease.(*Lease)
		calls[i], failed[i] = l.ops.(batchable).renewal(l.token, r.TTL), r.Failed
	}
	perMaster(ctx, b.rdb, calls, failed, func(part []int, sub []scriptCall) {
		done(part, b.renewPart(ctx, rs, part, sub))
	})
}

// renewPart sends the renewals at part of rs, whose calls are sub, in one
// batch, and returns their errors, in part's order.
func (b *renewBatch) renewPart(ctx context.Context, rs []watchdog.Renewal, part []int, sub []scriptCall) []error {
	var hctx []context.Context // for the leases' RenewEnd, if hooked
	for j, i := range part {
		if l := rs[i].Lease.(*Lease); l.hooked != nil {
			if hctx == nil {
				hctx = make([]context.Context, len(part))
			}
			hctx[j] = l.hooked.renewStart(ctx, true)
		}
	}
	errs := make([]error, len(part))
	for j, cmd := range sendAll(ctx, b.rdb, sub) {
		errs[j] = renewed(cmd.Bool())
		if l := rs[part[j]].Lease.(*Lease); l.hooked != nil {
			l.renewEnd(hctx[j], errs[j])
		}
	}
	return errs
}

// perMaster splits calls by master (see byMaster; failed marks the calls
// whose last send failed) and runs send on every part at once, the first
// on the caller's goroutine, with the part's places in calls and its
// calls; it returns once every send has, so that a slow or unreachable
// master holds up no other's part.
func perMaster(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall, failed []bool, send func(part []int, sub []scriptCall)) {
	parts := byMaster(ctx, rdb, calls, failed)
	if len(parts) == 0 {
		return
	}
	run := func(part []int) {
		sub := make([]scriptCall, len(part))
		for j, i := range part {
			sub[j] = calls[i]
		}
		send(part, sub)
	}
	var wg sync.WaitGroup
	for _, part := range parts[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(part)
		}()
	}
	run(parts[0])
	wg.Wait()
}

// byMaster splits calls by the master of their first key on a Cluster
// (the calls whose master is not known together), and leaves them whole
// elsewhere: at least one part for any call, each the calls' places. On
// a Cluster a call whose last send failed (failed[i]) goes in a part of
// its own, up to apartMax of them: its slot may be on the move to a
// master that does not answer, and go-redis follows a redirection with
// every call of the run or pipeline it is in, which would hold up the
// others on its master, batch after batch (a call that went in a part of
// its own and succeeded joins the others again).
func byMaster(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall, failed []bool) [][]int {
	type part struct {
		node  *redis.Client
		alone int // the call's place when it goes alone, else -1
	}
	idx := make([]int, len(calls))
	for i := range idx {
		idx[i] = i
	}
	apart := 0
	return groupBy(idx, func(i int) part {
		node, _ := nodeOf(ctx, rdb, calls[i].keys) // nil but on a Cluster
		if node != nil && failed[i] && apart < apartMax {
			apart++
			return part{node, i}
		}
		return part{node, -1}
	})
}

// apartMax is the most calls of a batch that go in parts of their own
// (see byMaster): enough for a slot's worth of leases caught in a run
// sent on to a master that stopped answering, few enough that a master
// down, whose every lease fails, costs no more than a hundred more
// round trips at once.
const apartMax = mergeMax
