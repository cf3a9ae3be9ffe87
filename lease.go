package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/watchdog"
)

// Lease is one holding of a lock, returned by a successful TryLock, Lock,
// RLock or Acquire. Its methods are safe for concurrent use.
type Lease struct {
	name  string
	token string
	fence uint64
	ops   leaseOps
	ttl   time.Duration      // 0: never expires
	wd    *watchdog.Watchdog // nil when the lease never expires
	// c is the client that issued the lease: its renewals run wd, its
	// workers the lease's calls, its give-ups a release that Unlock could
	// not make.
	c *Client

	// lostMu guards lost: Lost()'s channel, made at its first call (a
	// lease whose holder never asks costs none), and closed, or set to
	// watchdog.Closed, once the lease is known lost; gone says it is.
	lostMu sync.Mutex
	lost   chan struct{}
	gone   atomic.Bool
	// hooked, when the client has hooks, calls them for the lease.
	hooked *hooked

	turn     turn // Refresh and Unlock take turns
	released bool
	// releasing is set once an Unlock failed and the release goes on in
	// the background; released is then set when it succeeds.
	releasing bool
	// later is set once an Unlock gave up waiting for its turn: the
	// release follows when the turn comes (see unlockLater), and lateErr
	// is its ErrLost, for the next Unlock to return.
	later   atomic.Bool
	lateErr error
	// releases records whether a release of the lease that Unlock or the
	// background sent may have run in Redis. A release that then finds
	// the lease gone was answered by one of those; without them, gone is
	// a loss (see releaseOnce).
	releases releaseRecord
	// releasingNow is set once a release is on its way, before the watch
	// stops: a renewal in flight may then find the lease gone by it.
	releasingNow atomic.Bool
	// longest is the longest TTL that the lease's acquisition or any of
	// its renewals asked of Redis (the hand-off window for a lease handed
	// over), whether or not it got there: Redis keeps the lease no longer
	// than that after the last write that reaches it.
	longest atomic.Int64
}

// leaseOps is what a primitive does to Redis for a lease it issued.
type leaseOps interface {
	// refresh extends the lease to ttl; false means the token no longer
	// holds it.
	refresh(ctx context.Context, token string, ttl time.Duration) (bool, error)
	// release frees the lease; false means the token no longer held it.
	release(ctx context.Context, token string) (bool, error)
	// held reports whether the token holds the lease.
	held(ctx context.Context, token string) (bool, error)
}

// errGone is what a renewal returns to the watchdog when Redis says the
// lease is not ours any more.
var errGone = errors.New("lease gone")

// newLease starts watching, for the client c, a lease that Redis keeps for
// at least held from sent: from the acquiring request's send time, the
// lock's TTL. With first, its first renewal is due a third of the way to
// the end of that hold whether or not the lease renews itself (see
// watchdog.StartRenewing): a lease handed over by a release is held for
// less than its TTL until then, or, with a TTL under the hand-off window,
// for longer (see acquisition.grant). A lease released sooner costs no
// renewal (see waiting.handedOver).
//
// hk, if not nil, calls the client's hooks for the lease.
func newLease(c *Client, name, token string, fence uint64, ops leaseOps, cfg lockConfig, sent time.Time, held time.Duration, first bool, hk *hooked) *Lease {
	l := &Lease{name: name, token: token, fence: fence, ops: ops, ttl: cfg.ttl, c: c, hooked: hk}
	if cfg.ttl == 0 {
		return l
	}
	l.asked(cfg.ttl)
	if first {
		l.asked(queueLiveness) // Redis may keep a handed-over lease as long
	}
	wdc := watchdog.Config{
		TTL:    cfg.ttl,
		Auto:   cfg.autoRefresh,
		Renew:  l.renew,
		Gone:   func(err error) bool { return errors.Is(err, errGone) },
		OnLost: func(cause error) { l.markLost(lostBy(cause)) },
	}
	if _, ok := ops.(batchable); ok && c.batch != nil {
		wdc.Batch, wdc.Lease = c.batch, l
	}
	deadline := watchdog.Deadline(sent, held)
	if d, ok := ops.(drifter); ok {
		wdc.Drift = d.drift
		deadline = deadline.Add(-d.drift(held))
	}
	if first {
		l.wd = l.c.renewals.StartRenewing(wdc, deadline)
	} else {
		l.wd = l.c.renewals.Start(wdc, deadline)
	}
	return l
}

// asked records a TTL asked of Redis for the lease (see longest).
func (l *Lease) asked(ttl time.Duration) {
	for {
		old := l.longest.Load()
		if int64(ttl) <= old || l.longest.CompareAndSwap(old, int64(ttl)) {
			return
		}
	}
}

// renew is the lease's renewal to ttl, for its watchdog; errGone when
// the lease is no longer the holder's.
func (l *Lease) renew(ctx context.Context, ttl time.Duration) error {
	if l.hooked == nil {
		return renewed(l.ops.refresh(ctx, l.token, ttl))
	}
	auto := watchdog.Automatic(ctx)
	hctx := l.hooked.renewStart(ctx, auto)
	if auto {
		ctx = valuesOf{ctx, hctx} // the watchdog's deadline, the hook's values
	} else {
		ctx = hctx
	}
	err := renewed(l.ops.refresh(ctx, l.token, ttl))
	l.renewEnd(hctx, err)
	return err
}

// renewEnd calls the RenewEnd hook for a renewal that ended with err: a
// renewal that found the lease gone after its own release was sent was
// overtaken by it (context.Canceled, as one abandoned), not lost.
func (l *Lease) renewEnd(hctx context.Context, err error) {
	if errors.Is(err, errGone) && l.releasingNow.Load() {
		err = fmt.Errorf("renewal overtaken by the lease's release: %w", context.Canceled)
	}
	l.hooked.renewEnd(hctx, err)
}

// valuesOf is a context that ends as its Context does, with the values
// of values first.
type valuesOf struct {
	context.Context
	values context.Context
}

func (c valuesOf) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// lostBy is the reason for a loss the watchdog reports with cause.
func lostBy(cause error) LostReason {
	switch {
	case errors.Is(cause, watchdog.ErrUnconfirmed):
		return LostUnreachable
	case errors.Is(cause, watchdog.ErrExpired):
		return LostExpired
	}
	return LostGone
}

// drifter is implemented by the lease operations of locks whose expiry
// runs on several servers' clocks (Redlock): drift is how far those
// clocks may run ahead of the holder's over ttl.
type drifter interface {
	drift(ttl time.Duration) time.Duration
}

// Name returns the lock's name; for a MutexSet lease, the member's.
func (l *Lease) Name() string { return l.name }

// Token returns the lease's secret: 128 random bits from crypto/rand, hex
// encoded. Only the holder of the token can refresh or release the lease.
func (l *Lease) Token() string { return l.token }

// Fence returns the lease's fencing token: greater than every fence issued
// before for the same lock (for a MutexSet, the same member). Pass it to
// the resource you protect and have it refuse writes with a fence lower
// than one it has seen; see the README's GUARANTEES.
func (l *Lease) Fence() uint64 { return l.fence }

// Lost returns a channel that is closed once the lease is known lost: a
// renewal found it gone, or Redis could not be reached before its TTL ran
// out. It closes before another client could have been given the lock. It
// is not closed by Unlock. Every call returns the same channel.
func (l *Lease) Lost() <-chan struct{} {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
	}
	return l.lost
}

// Refresh extends the lease to ttl from now, and makes ttl the TTL of
// later automatic renewals. It returns ErrLost, and closes Lost(), when the
// lease is no longer held or was already known lost; after Unlock it
// returns ErrLost (matching ErrInvalid too) and leaves Lost() open. On a network error
// the lease stays held, but its expiry is reckoned as if the new TTL may
// have been applied, so a failed shortening Refresh shortens it too. If
// ctx ends while another Refresh or an Unlock of the lease waits for
// Redis, Refresh returns ctx's error and changes nothing.
func (l *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return errNilLease
	}
	if ttl < MinTTL {
		return fmt.Errorf("%w: TTL %v is below the minimum %v", ErrInvalid, ttl, MinTTL)
	}
	if l.byNode() && ttl < redlockMinTTL {
		return fmt.Errorf("%w: TTL %v is below Redlock's minimum %v", ErrInvalid, ttl, redlockMinTTL)
	}
	if err := l.turn.take(ctx); err != nil {
		return fmt.Errorf("dlock: refresh %q: %w", l.name, err)
	}
	defer l.turn.give()
	if l.released || l.releasing || l.later.Load() {
		// No longer the caller's to extend: ErrLost, as DESIGN has it,
		// and ErrInvalid, as for any call after Unlock; Lost() stays
		// open (Unlock is no loss).
		return fmt.Errorf("%w: lease of %q already unlocked (%w)", ErrLost, l.name, ErrInvalid)
	}
	if l.wd == nil {
		return fmt.Errorf("%w: lease of %q never expires", ErrInvalid, l.name)
	}
	l.asked(ttl)
	err := l.wd.Refresh(ctx, ttl)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errGone), errors.Is(err, watchdog.ErrStopped):
		l.markLost(LostGone) // a no-op when stopped by a loss already
		return fmt.Errorf("%w: %q", ErrLost, l.name)
	}
	return fmt.Errorf("dlock: refresh %q: %w", l.name, explain(err))
}

// Unlock releases the lease and wakes waiters. It returns ErrLost if the
// lease was lost before or while it ran (Lost() was closed) or is no
// longer held; a second Unlock returns ErrInvalid. If Redis cannot be
// reached before ctx ends, Unlock returns the error (matching ErrLost too
// if the lease was lost), and the release goes on in the background, also
// for a lost lease (Redis may keep it yet): the lease is no longer renewed, so it ends by its
// TTL at the latest, and Lost() still closes at its deadline unless the
// release succeeds first. So too when ctx ends while a Refresh or another
// Unlock of the lease waits for Redis: the release follows once that call
// is done. Calling Unlock again tries the release at once (nil if the
// background one succeeded meanwhile, ErrLost if it found the lease lost);
// dropping the lease is safe too.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return errNilLease
	}
	if l.hooked == nil {
		return l.unlock(ctx)
	}
	ctx = l.hooked.releaseStart(ctx)
	err := l.unlock(ctx)
	l.hooked.releaseEnd(ctx, err)
	return err
}

// unlock is Unlock without hooks.
func (l *Lease) unlock(ctx context.Context) error {
	if err := l.turn.take(ctx); err != nil {
		l.later.Store(true)
		if !l.c.giveUps.do(l.name, l.unlockLater) {
			// A closed client runs no give-ups, but still renews the
			// lease: the release must come all the same.
			go l.unlockLater(context.Background())
		}
		return fmt.Errorf("dlock: unlock %q: %w", l.name, err)
	}
	defer l.turn.give()
	return l.unlockTurn(ctx)
}

// unlockLater is the release of an Unlock whose ctx ended before its turn
// came (see unlock), run with the client's give-ups; if ctx ends first
// (the client is closed) it goes on by itself, since the lease is still
// renewed and would otherwise never lapse: it waits for the
// turn and releases, unless another Unlock did meanwhile, as Unlock would
// have (a release that fails goes on in the background). The next Unlock
// then returns nil, or its ErrLost.
func (l *Lease) unlockLater(ctx context.Context) {
	if l.turn.take(ctx) != nil {
		// The client was closed before the turn came; the lease is still
		// renewed, so the release must come all the same (as in unlock).
		go l.unlockLater(context.Background())
		return
	}
	defer l.turn.give()
	if l.released {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, giveUpTry)
	defer cancel()
	switch err := l.unlockTurn(rctx); {
	case err == nil:
		l.releasing = true // as after a release in the background
	case errors.Is(err, ErrLost):
		l.lateErr = err
	}
}

// unlockTurn is unlock once the caller has the lease's turn.
func (l *Lease) unlockTurn(ctx context.Context) error {
	if err := l.lateErr; err != nil {
		l.lateErr = nil // what the Unlock that gave up would have returned
		return err
	}
	if l.released && l.releasing {
		l.releasing = false // the release done in the background answers this call
		return nil
	}
	if err := l.usable(); err != nil {
		return err
	}
	var deadline time.Time
	var ttl time.Duration
	var alarm *time.Timer
	var alarmed chan struct{} // closed once the alarm has marked the loss
	if l.wd != nil {
		// Stopped first, so that no renewal can race the release and
		// report a loss that Unlock itself caused; until the release is
		// answered, Lost() still closes at the lease's deadline.
		l.releasingNow.Store(true)
		deadline, ttl = l.wd.Stop()
		// Lost at the deadline: for want of the release's reply, or for
		// what the watchdog met if the deadline had passed already.
		reason := LostUnreachable
		if !time.Now().Before(deadline) {
			reason = lostBy(l.wd.Lapse())
		}
		alarmed = make(chan struct{})
		alarm = time.AfterFunc(time.Until(deadline), func() { defer close(alarmed); l.markLost(reason) })
	}
	ok, err := l.sendRelease(ctx)
	gone, unconfirmed := LostGone, errors.Is(err, errReleaseUnconfirmed)
	if unconfirmed {
		err, gone = nil, LostUnreachable
	}
	if alarm != nil && !alarm.Stop() {
		<-alarmed // it fired: its loss is marked before the outcome is read
	}
	if err != nil {
		// Also for a lease lost already: Redis may keep it yet (a loss
		// for want of a reply), or again (a renewal held back that
		// arrives late).
		l.releaseInBackground(deadline, ttl)
		if l.isLost() {
			return fmt.Errorf("%w: %q was lost (unlock: %w)", ErrLost, l.name, explain(err))
		}
		return fmt.Errorf("dlock: unlock %q: %w", l.name, explain(err))
	}
	// A release in the background (l.releasing) also releases what this
	// one did not reach; an earlier attempt of this call does not. A
	// Redlock's ok already counts, node by node, the releases that may
	// have run before (see redlockLease.nodes).
	background := l.releasing
	retried := !l.byNode() && l.releases.ran.Load()
	l.released, l.releasing = true, false
	if unconfirmed && !background {
		// The shares it did not reach are released in the background
		// until they have expired (a Redlock's: raising their nodes'
		// fences too); a retried Unlock's are, by the release it follows.
		l.c.giveUps.start(l.name, ttl, l.releaseLate, nil, 1, nil)
	}
	if l.isLost() {
		return fmt.Errorf("%w: %q was lost before Unlock", ErrLost, l.name)
	}
	if !ok && (!retried || unconfirmed) {
		l.markLost(gone)
		return fmt.Errorf("%w: %q", ErrLost, l.name)
	}
	// After an Unlock that failed while the lease was held, a release that
	// finds it gone means an earlier attempt got through: released.
	l.ended("")
	return nil
}

// releaseTries is how many times Unlock sends a release that fails in a
// way that may pass (a broken connection, a timeout), as go-redis would
// with its default MaxRetries of 3: releases go to it once (see once).
const releaseTries = 4

// releaseRefusedFor is how long Unlock sends again a release that Redis
// refused for now, running nothing (TRYAGAIN while a Cluster slot moves,
// LOADING, CLUSTERDOWN...), however many tries that takes.
const releaseRefusedFor = 5 * time.Second

// sendRelease sends the lease's release, again while it fails in a way
// that may pass (up to releaseTries times, or for releaseRefusedFor while
// Redis refuses it for now); each attempt records whether Redis may have
// run it (see releaseOnce).
func (l *Lease) sendRelease(ctx context.Context) (ok bool, err error) {
	if err := ctx.Err(); err != nil {
		// Under a ctx already ended nothing is sent (go-redis checks it
		// first): no attempt that may have run.
		return false, fmt.Errorf("%w (release not sent)", err)
	}
	pause, start, tries := time.Duration(0), time.Now(), 0
	for {
		ok, err = bounded(ctx, l.c, l.releaseOnce)
		if err == nil || !transient(err) {
			return ok, err
		}
		if isReply(err) { // refused for now
			if time.Since(start) >= releaseRefusedFor {
				return ok, err
			}
		} else if tries++; tries == releaseTries {
			return ok, err
		}
		pause = grow(pause)
		select {
		case <-ctx.Done():
			return ok, err
		case <-time.After(pause):
		}
	}
}

// releaseOnce sends the lease's release once, an attempt of sendRelease
// or releaseLate, and records in l.releases whether Redis may have run it
// (see releaseRecord). A Redlock's release counts node by node instead
// (see redlockLease.nodes).
func (l *Lease) releaseOnce(ctx context.Context) (bool, error) {
	return l.releases.send(ctx, func() (bool, error) { return l.ops.release(ctx, l.token) })
}

// releaseRecord lets one release of a lease (or of a Redlock lease's share
// on one node) be on its way at a time, and records whether one may have
// run in Redis: ran is set once one was answered, or was sent though its
// reply never came (see mayHaveRun). Each release records what its
// request itself met, also when its caller stopped waiting for it (bounded
// then returns ctx's error, which says nothing of whether the request was
// sent), and every release before it has recorded its outcome once its
// turn comes: a later release that finds the lease gone can tell a loss
// from the work of an earlier one.
type releaseRecord struct {
	turn turn
	ran  atomic.Bool
}

// send runs send, one release, once the release before it has its
// outcome (if ctx ends first, it sends nothing), and records the outcome.
func (r *releaseRecord) send(ctx context.Context, send func() (bool, error)) (bool, error) {
	if err := r.turn.take(ctx); err != nil {
		return false, fmt.Errorf("%w (%w)", err, errNotSent)
	}
	defer r.turn.give()
	ok, err := send()
	if ok || mayHaveRun(err) && !endedUnsent(err) {
		r.ran.Store(true)
	}
	return ok, err
}

// endedUnsent reports whether err, as go-redis returned it for a request
// sent once (see once), says that ctx ended before the request was
// written: go-redis returns ctx's error itself only then (waiting for a
// connection from its pool, or before), and a wait for the reply that
// runs out as a *net.OpError (an i/o timeout, not ctx's error). Not for
// an error from bounded: its ctx error may also mean that it stopped
// waiting for a request already sent.
func endedUnsent(err error) bool {
	var op *net.OpError
	return (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && !errors.As(err, &op)
}

// neverSent reports whether err says that a request sent once (see once)
// never reached Redis: it could not connect, or got no connection from
// go-redis' pool in time. (Had go-redis sent it again, an earlier attempt
// might have: unanswered does not tell these apart.)
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, redis.ErrPoolTimeout)
}

// mayHaveRun reports whether a request sent once that failed with err may
// have run in Redis all the same: unanswered, but not never sent.
func mayHaveRun(err error) bool {
	return unanswered(err) && !neverSent(err)
}

// byNode reports whether the lease is a Redlock's, whose releases count
// node by node (see redlockLease.nodes) rather than by l.releases.
func (l *Lease) byNode() bool {
	_, ok := l.ops.(*redlockLease)
	return ok
}

// releaseInBackground follows an Unlock that failed: Unlock means release,
// so the lease is no longer renewed, only watched until deadline (reached
// with a renewal to ttl, as the stopped watch told) unless it was lost
// already, and the release is retried until it gets through or the lease
// has expired, the longest TTL asked of Redis after the retries began (a
// lease that never expires: until the client is closed). The caller has
// the lease's turn.
func (l *Lease) releaseInBackground(deadline time.Time, ttl time.Duration) {
	lapse := time.Duration(0)
	if l.wd != nil {
		// Redis keeps the lease no longer than the longest TTL asked of
		// it (the last one set may be shorter: a Refresh that failed, or
		// a longer renewal that lands late).
		lapse = max(ttl, time.Duration(l.longest.Load()))
	}
	if l.wd != nil && !l.isLost() {
		wdc := l.wd.Config()
		wdc.TTL, wdc.Auto = ttl, false
		// What it misses then, but for a Refresh finding the lease gone,
		// is the release's confirmation.
		wdc.OnLost = func(cause error) {
			if r := lostBy(cause); r == LostGone {
				l.markLost(r)
				return
			}
			l.markLost(LostUnreachable)
		}
		l.wd = l.c.renewals.Start(wdc, deadline)
	}
	if !l.releasing {
		l.releasing = true
		var quit func()
		if l.wd == nil {
			// Nothing else ends a lease that never expires.
			quit = func() { l.ended(LostUnreachable) }
		}
		l.c.giveUps.start(l.name, lapse, l.releaseLate, nil, 1, quit)
	}
}

// releaseLate is the background release after a failed Unlock, or one
// that a Redlock's majority did not confirm (retried until it is). Once
// Redis answers, the lease's watch ends: it counts as unlocked when this
// release took it, or found it gone after an earlier release that may
// have run (l.releases; a Redlock's counts node by node), and as lost
// when it found it gone with no release ever sent (see releaseOnce).
func (l *Lease) releaseLate(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // nothing sent
	}
	ok, err := bounded(ctx, l.c, l.releaseOnce)
	if err != nil {
		return err
	}
	_ = l.turn.take(context.Background())
	defer l.turn.give()
	if !l.released && !l.isLost() {
		// Whether another release (Unlock's, or an earlier one here) may
		// have run: if not, this one finding the lease gone is a loss.
		ran := !l.byNode() && l.releases.ran.Load() // a Redlock's ok counts node by node
		if l.wd != nil {
			l.wd.Stop()
		}
		if !ok && !ran {
			l.markLost(LostGone)
			return nil
		}
		l.released = true
		l.ended("")
	}
	return nil
}

// errNilLease is what Unlock, Refresh and Held of a nil *Lease return: the
// lease of an acquisition that failed, used unchecked (a deferred Unlock).
var errNilLease = fmt.Errorf("%w: nil lease (its acquisition failed)", ErrInvalid)

// Held asks Redis whether the lease still holds the lock.
func (l *Lease) Held(ctx context.Context) (bool, error) {
	if l == nil {
		return false, errNilLease
	}
	ok, err := bounded(ctx, l.c, func(ctx context.Context) (bool, error) { return l.ops.held(ctx, l.token) })
	if err != nil {
		return false, fmt.Errorf("dlock: held %q: %w", l.name, explain(err))
	}
	return ok, nil
}

// usable reports an error once the lease was unlocked. The caller has
// the lease's turn.
func (l *Lease) usable() error {
	if l.released {
		return l.errUnlocked()
	}
	return nil
}

// errUnlocked is the error of a call on a lease already unlocked.
func (l *Lease) errUnlocked() error {
	return fmt.Errorf("%w: lease of %q already unlocked", ErrInvalid, l.name)
}

// isLost reports whether the lease is known lost (Lost() is closed).
func (l *Lease) isLost() bool { return l.gone.Load() }

// markLost closes Lost() and ends the lease's holding for reason, unless
// it ended already.
func (l *Lease) markLost(reason LostReason) {
	l.lostMu.Lock()
	if !l.gone.Load() {
		l.gone.Store(true)
		if l.lost == nil {
			l.lost = watchdog.Closed
		} else {
			close(l.lost)
		}
	}
	l.lostMu.Unlock()
	l.ended(reason)
}

// ended reports the end of the lease's holding to its hooks, if any, once:
// lost for reason, or released when reason is "".
func (l *Lease) ended(reason LostReason) {
	if l.hooked != nil {
		l.hooked.end(reason)
	}
}
