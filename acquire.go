package dlock

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/token"
	"github.com/go-dlock/dlock/internal/watchdog"
)

// attempt is the outcome of one try script.
type attempt struct {
	ok    bool
	fence uint64 // the new lease's fence, when ok
	// wait is, when held, the time until the holder's lease runs out; a
	// waiter wakes by itself then, so a crashed holder or a lost
	// announcement costs time, never liveness. Negative: it never expires.
	wait time.Duration
	// holder identifies the holding lease (its fence), for the stall
	// timeout.
	holder uint64
	// at is the server's clock (µs) when it refused, where the script
	// tells: a hand-off to this token dated before it is void.
	at int64
	// member is the MutexSet member taken, when ok.
	member string
	// alone marks a read share kept in the RWMutex's owner key, when ok
	// (see rw_rlock.lua): renewed and checked as a writer's lease is.
	alone bool
	// again marks a lease its token held already when the try ran, when
	// ok: the try was sent again after its reply was lost (by dlock, or
	// by go-redis unseen), or a release had handed the lock to it, and
	// then Redis keeps the lease until the hand-off window ends (see
	// grant's handed).
	again bool
	// asked marks, on a Redlock client, the nodes that may hold a share:
	// the lease's, or when refused, set only if the try could not give
	// back what it got on some node.
	asked []bool
}

// acquisition is one call's taking of a lock, for the shared
// try-and-wait loop: what it asks for, and the primitive that knows how
// (by). It is one allocation: the primitive reads the call's values from
// it rather than from closures.
type acquisition struct {
	lock *lock
	by   taker
	// what and name name what is taken in messages: the lock's kind and
	// name, or for instance "member of mutex set \"pool\"" and a member.
	what, name string
	channel    string // where releases are announced
	// join is joinQueue for a caller of a queuer that will wait (its try
	// joins the queue, a heartbeat keeps its place, and releases hand the
	// lock to it), joinNever otherwise.
	join int
	// The call's values, for the primitive: the holder's metadata (a
	// Mutex's or FairMutex's, an Election's value), the MutexSet member
	// asked for ("" for any), the Semaphore permits.
	meta   string
	member string
	n      int64
	// shared marks the read side of an RWMutex, for hooks.
	shared bool
	// tries counts a Redlock acquisition's tries, one after another: each
	// share names the last try that took it up (see redlockMutex.try).
	// (With shared, one word: ten thousand waiters keep one acquisition
	// each.)
	tries int32
	// err is a bad argument of this call (or the lock's bad name or
	// option), returned instead of trying.
	err error
}

// taker is how a primitive takes its lock: a queuer by the try script of
// a queue, a tryer its own way.
type taker interface {
	// granted returns the operations of the lease a successful try of a
	// took.
	granted(a *acquisition, r attempt) leaseOps
	// leave withdraws a caller of a that gives up: what a try of its own
	// took though the caller never saw the reply, and its place in a
	// queue or its intention. It changes nothing for a token that has
	// neither.
	leave(ctx context.Context, a *acquisition, tok string) error
}

// queuer is a taker whose waiters queue in Redis: a try, and a waiter's
// heartbeat, are one run of tryScript's call in a join mode, whose reply
// parseTry reads.
type queuer interface {
	taker
	tryScript(a *acquisition, tok string, join int) scriptCall
	parseTry(reply any, err error) (attempt, error)
}

// tryer is a taker that tries its own way.
type tryer interface {
	taker
	tryAlone(ctx context.Context, a *acquisition, tok string) (attempt, error)
}

// Every taker is one or the other (see acquisition.try).
var (
	_ queuer = (*queued)(nil)
	_ queuer = (*Election)(nil)
	_ queuer = (*RWMutex)(nil)
	_ queuer = (*MutexSet)(nil)
	_ queuer = (*Semaphore)(nil)
	_ tryer  = readSide{}
	_ tryer  = (*redlockMutex)(nil)
)

// try runs the primitive's try once for tok. Tries with the same token
// are idempotent: one that finds the token holding the lock reports it
// taken, so a try sent again after a lost reply is harmless.
func (a *acquisition) try(ctx context.Context, tok string) (attempt, error) {
	if q, ok := a.by.(queuer); ok {
		call := q.tryScript(a, tok, a.join)
		rdb := a.lock.c.scripter(ctx)
		cmd := call.run(ctx, rdb)
		if c, ok := a.by.(converter); ok && c.converted(ctx, cmd.Err()) {
			cmd = call.run(ctx, rdb)
		}
		return q.parseTry(cmd.Result())
	}
	return a.by.(tryer).tryAlone(ctx, a, tok)
}

// listensOn is the channel a's caller listens on while it waits: a
// queued waiter hears its hand-offs and wake-ups on its client's channel
// beside a.channel (see keys.ClientChannel), but for a waiter for a named
// MutexSet member, which shares the member's channel with the others
// (its removal wakes them all); other callers listen on a.channel.
func (a *acquisition) listensOn() string {
	if _, queued := a.by.(queuer); queued && a.member == "" {
		return keys.ClientChannel(a.channel, a.lock.c.id)
	}
	return a.channel
}

// queues reports whether a caller waits in a queue: its heartbeat (see
// beat) keeps its place alive between its tries, and a release may hand
// it the lock (see handOff).
func (a *acquisition) queues() bool { return a.join == joinQueue }

// beat is the heartbeat of a queued waiter holding tok (see heartbeats);
// parse reads its reply.
func (a *acquisition) beat(tok string) scriptCall {
	return a.by.(queuer).tryScript(a, tok, joinBeat)
}

// parse reads the reply of a's try or heartbeat.
func (a *acquisition) parse(reply any, err error) (attempt, error) {
	return a.by.(queuer).parseTry(reply, err)
}

// handOff is the least time a lock handed to a queued waiter by a release
// is held for it, from the send time of the waiter's last refused try,
// until its first renewal (see waiting.handedOver); 0 when no release
// hands a the lock.
func (a *acquisition) handOff() time.Duration {
	if a.queues() {
		return queueLiveness
	}
	return 0
}

// ops returns the operations of the lease a successful try took.
func (a *acquisition) ops(r attempt) leaseOps { return a.by.granted(a, r) }

// leave withdraws a caller that gives up (see taker).
func (a *acquisition) leave(ctx context.Context, tok string) error { return a.by.leave(ctx, a, tok) }

// info names the lock taken, for hooks.
func (a *acquisition) info() LockInfo {
	return LockInfo{Kind: string(a.lock.kind), Name: a.lock.name, Shared: a.shared}
}

// grant makes the lease of a successful try sent at sent under ctx, which
// Redis keeps for held from then (see newLease): named for the MutexSet
// member it took, or else for the lock. handed tells that a release may
// have handed the lock to tok: Redis then keeps it until the hand-off
// window ends (see handOff), longer than a TTL under that window, and the
// lease's first renewal, due whether or not it renews itself, brings it
// back to the TTL.
func (a *acquisition) grant(ctx context.Context, tok string, r attempt, sent time.Time, held time.Duration, handed bool) *Lease {
	var hk *hooked
	if h := a.lock.c.hooks; h != nil {
		hk = &hooked{h: h, ctx: context.WithoutCancel(ctx), info: LeaseInfo{LockInfo: a.info(), Member: r.member, Fence: r.fence}, since: time.Now()}
	}
	ttl := a.lock.cfg.ttl
	first := held < ttl || handed && ttl < a.handOff()
	return newLease(a.lock.c, cmp.Or(r.member, a.lock.name), tok, r.fence, a.ops(r), a.lock.cfg, sent, held, first, hk)
}

// acquire takes the lock: once if !block, else waiting until it is
// acquired, ctx ends, or the stall timeout passes. Whatever error it
// returns, it leaves nothing of the caller's in Redis (see giveUp). It
// calls the client's hooks, if any, around the acquisition.
func (c *Client) acquire(ctx context.Context, a *acquisition, block bool) (*Lease, error) {
	h := c.hooks
	if h == nil {
		return c.take(ctx, a, block)
	}
	lk := a.info()
	ctx = h.acquireStart(ctx, lk)
	start := time.Now()
	l, err := c.take(ctx, a, block)
	h.acquireEnd(ctx, lk, l, err, time.Since(start))
	if l != nil {
		l.hooked.acquired()
	}
	return l, err
}

// take is acquire without hooks.
func (c *Client) take(ctx context.Context, a *acquisition, block bool) (*Lease, error) {
	if err := a.err; err != nil {
		return nil, err
	}
	tok, err := token.Of(c.id)
	if err != nil {
		return nil, err
	}
	if block {
		return c.wait(ctx, a, tok)
	}
	return c.tryOnce(ctx, a, tok)
}

// tryOnce runs one try and returns its lease, ErrNotAcquired, or the
// error, after giving up what an unanswered try may have taken.
func (c *Client) tryOnce(ctx context.Context, a *acquisition, tok string) (*Lease, error) {
	sent := time.Now()
	r, pending, err := a.run(ctx, tok, nil)
	if !r.ok && r.asked != nil && !unanswered(err) {
		// Shares a Redlock try got and could not give back (their nodes
		// just failed to answer), refused or failed: given back in the
		// background, not in the caller's time. (An unanswered try is
		// given up on every node below.)
		c.giveUpLater(a, tok, nil, 1)
	}
	switch {
	case err != nil:
		if unanswered(err) {
			c.giveUp(ctx, a, tok, pending, false)
		}
		return nil, a.failedAfter(ctx, err, noReply(pending, nil))
	case r.ok && a.late(sent):
		c.giveUp(ctx, a, tok, nil, true)
		return nil, a.failed(ctx, errLate)
	case r.ok:
		return a.grant(ctx, tok, r, sent, a.lock.cfg.ttl, false), nil
	}
	return nil, fmt.Errorf("%w: %s %q is not free", ErrNotAcquired, a.what, a.name)
}

// run is one try, returning by ctx's end (or stop's: see
// boundedTracked); pending, when not nil, closes once the abandoned
// request has finished.
func (a *acquisition) run(ctx context.Context, tok string, stop <-chan struct{}) (r attempt, pending <-chan struct{}, err error) {
	return boundedTracked(ctx, a.lock.c, func(ctx context.Context) (attempt, error) { return a.try(ctx, tok) }, stop)
}

// failed wraps an error that ended an acquisition. When ctx ended, both
// ErrNotAcquired and ctx.Err() match the result.
func (a *acquisition) failed(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: waiting for %s %q: %w", ErrNotAcquired, a.what, a.name, ctxErr)
	}
	return fmt.Errorf("dlock: %s %q: %w", a.what, a.name, explain(err))
}

// failedAfter is failed, telling what went wrong with the last try, if
// anything: why ctx could end before the lock was had.
func (a *acquisition) failedAfter(ctx context.Context, err, trouble error) error {
	if trouble == nil {
		return a.failed(ctx, err)
	}
	return fmt.Errorf("%w (last try: %w)", a.failed(ctx, err), explain(trouble))
}

// untrusted reports a TLS handshake that failed on a certificate: a
// setting to fix, not a failure that passes.
func untrusted(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &header)
}

// late reports whether the reply to a try sent at sent that took the lock
// came too late to use: the lease's deadline (see watchdog.Deadline) has
// passed, so it would be declared lost at once while Redis may already
// have let it expire and given the lock to another. Redis (paused before
// it wrote the reply) or the network held the reply back.
func (a *acquisition) late(sent time.Time) bool {
	return a.lock.cfg.ttl > 0 && !time.Now().Before(watchdog.Deadline(sent, a.lock.cfg.ttl))
}

// errLate is the error of a try whose reply came too late (see late).
var errLate = fmt.Errorf("lock granted, but the reply from Redis came after the lease's deadline: %w", os.ErrDeadlineExceeded)

// errNoReply is the trouble of a try abandoned when ctx ended: Redis had
// not answered it (it is slow, paused, or unreachable). It matches
// os.ErrDeadlineExceeded, as a network timeout does.
var errNoReply = fmt.Errorf("no reply from Redis in time: %w", os.ErrDeadlineExceeded)

// noReply is what the last try met: errNoReply when it was abandoned
// (pending is not nil), followed by the trouble of the try before, if any
// (say, a refused connection), else trouble.
func noReply(pending <-chan struct{}, trouble error) error {
	switch {
	case pending == nil:
		return trouble
	case trouble != nil:
		return fmt.Errorf("%w; the try before: %w", errNoReply, trouble)
	}
	return errNoReply
}

// unanswered reports whether a request that failed with err may have been
// applied by Redis all the same: its connection broke, or it was
// abandoned when ctx ended. An error reply (LOADING, NOPERM...) means the
// script did not run; a closed client, or a call that never had a worker,
// sent nothing.
func unanswered(err error) bool {
	return err != nil && !isReply(err) && !errors.Is(err, ErrNoMember) && !errors.Is(err, redis.ErrClosed) &&
		!errors.Is(err, errNotSent)
}

// isReply reports whether err is an error reply from Redis: the command
// did not run.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// transient reports whether an error may pass by itself: a network
// failure, a server restarting, in the middle of a failover or busy with
// a script that runs long, not a
// refusal, a closed client, a server whose certificate is not trusted or a
// reply dlock cannot read.
func transient(err error) bool {
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, errBadReply) || errors.Is(err, ErrNoMember) || untrusted(err) {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true
	}
	for _, p := range []string{"LOADING", "BUSY ", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK"} {
		if strings.HasPrefix(rerr.Error(), p) {
			return true
		}
	}
	return false
}
