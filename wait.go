package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-dlock/dlock/internal/notify"
	"github.com/go-dlock/dlock/internal/watchdog"
)

// waiting is the state of one blocked acquisition between its tries.
//
// Waiting costs one try per wake-up, none when the wake-up hands the lock
// over (see handedOver). A waiter wakes when a release is announced (the
// hub wakes one waiter per client for a plain release), when the holder's
// lease would run out, when its heartbeat finds that a try is due, and
// after a transient error, backing off while the error lasts: the first
// try is as patient as the later ones. A queued waiter's place is kept
// alive between its tries by its heartbeat, sent with the client's other
// waiters' (see heartbeats), whose replies move its wake-up as a try's
// would: a holder that renews its lease wakes no waiter.
type waiting struct {
	c   *Client
	a   *acquisition
	tok string
	w   waiter // nil until subscribed (or while the subscription fails)
	b   *beat  // the heartbeat, once a try joined a queue
	// bell rings when w is woken or the client closed, and when b has a
	// reply: a sleep waits on it and ctx alone, whatever wakes it.
	bell chan struct{}

	holder     uint64        // the holder the stall timeout counts for
	stallClock time.Time     // when that holder was first seen
	backoff    time.Duration // after a failed try
	subBackoff time.Duration // after a failed subscription
	trouble    error         // the last try's transient error, reported if ctx ends first
	// woken is set while this waiter owes a try to a wake-up it consumed;
	// if it gives up instead, the wake-up goes to another local waiter.
	// (The flags sit together: ten thousand waiters keep one waiting
	// each.)
	woken bool
	// answered tells whether the last try's outcome is known; pending,
	// when not nil, closes once its abandoned request has finished.
	answered bool
	// waiting is set once the caller waits and the client has hooks;
	// waitCtx is then the context WaitStart returned.
	waiting bool
	// tried is set after the first try: the caller waits from then on.
	tried   bool
	pending <-chan struct{}
	// refused is when the last try that Redis answered without the lock
	// was sent, and refusedAt the server's clock (µs) when it ran, if the
	// script tells: a hand-off came after it (see handedOver).
	refused   time.Time
	refusedAt int64
	waitCtx   context.Context
	// left marks, on a Redlock client, the nodes where an earlier try may
	// have left a share it could not give back (see attempt.asked): the
	// lease releases there too.
	left []bool
}

// wait takes the lock, waiting until it is acquired, ctx ends, or the
// stall timeout passes; on failure it leaves nothing behind.
func (c *Client) wait(ctx context.Context, a *acquisition, tok string) (*Lease, error) {
	s := &waiting{c: c, a: a, tok: tok, bell: make(chan struct{}, 1), stallClock: time.Now(), answered: true}
	// Listening already: then no release can go unheard between the
	// first try and the wait, and that try needs no second.
	channel := a.listensOn()
	s.w = c.listen.join(channel, tok, s.bell)
	defer s.close()
	for {
		l, next, err := s.try(ctx)
		if l != nil {
			return l, nil
		}
		if err == nil && !s.waiting && s.c.hooks != nil {
			s.waiting, s.waitCtx = true, s.c.hooks.waitStart(ctx, s.a.info())
		}
		if err == nil && s.w == nil {
			var subscribed bool
			if subscribed, err = s.subscribe(ctx, channel); subscribed {
				continue // a release may have come before the subscription
			}
		}
		if err == nil {
			err = s.sleep(ctx, next)
		}
		if err == nil {
			if l := s.handedOver(ctx); l != nil {
				return l, nil
			}
		}
		if err != nil {
			if c.open.Err() != nil {
				// Closed: what is left is given up in the background.
				return nil, s.quit(c.open, errClosedClient)
			}
			return nil, s.quit(ctx, err)
		}
	}
}

// try runs one try and returns the lease if it took the lock; otherwise
// how long to sleep unless woken (<0: until woken), or the error that
// ends the wait.
func (s *waiting) try(ctx context.Context) (*Lease, time.Duration, error) {
	sent := time.Now()
	// Close ends a waiter's wait, even in a request that Redis does not
	// answer (stop; the other calls of a wait are woken by its bell). The
	// first try is not a waiter's yet, and costs no hand-over to a worker
	// when ctx never ends.
	var stop <-chan struct{}
	if s.tried {
		stop = s.c.open.Done()
	}
	s.tried = true
	r, pending, err := s.a.run(ctx, s.tok, stop)
	s.pending, s.answered = pending, !unanswered(err)
	if !r.ok {
		// A Redlock try, refused or failed, may have left shares it could
		// not give back: the lease, or the give-up, releases there.
		s.left = either(s.left, r.asked)
	}
	switch {
	case err == nil && r.ok && s.a.late(sent):
		// Tried again at once: a try of the same token that finds the
		// lease still held sets its TTL anew, from a send time known.
		s.trouble = errLate
		return nil, 0, nil
	case err == nil && r.ok:
		r.asked = either(r.asked, s.left)
		return s.a.grant(ctx, s.tok, r, sent, s.a.lock.cfg.ttl, r.again), 0, nil
	case err == nil:
		s.woken, s.backoff = false, 0
		if s.b == nil && s.a.queues() {
			s.b = s.c.beats.join(s.a, s.tok, s.bell)
		}
		next, err := s.refusal(r, sent)
		return nil, next, err
	case errors.Is(err, notify.ErrClosed):
		return nil, 0, err
	case ctx.Err() == nil && transient(err):
		s.backoff = grow(s.backoff)
		s.trouble = err
		s.c.log.Debug("dlock: try failed while waiting; retrying", "lock", s.a.name, "err", err, "in", s.backoff)
		return nil, s.backoff, nil
	}
	return nil, 0, s.a.failedAfter(ctx, err, noReply(pending, s.trouble))
}

// handedOver returns the lease a release handed this waiter along with
// its wake-up, or nil: then the waiter tries, and a try finds a lock
// handed to it held already, whatever became of the message.
//
// Why the lease's deadline is safe: the release made this waiter the
// holder until its liveness deadline in the queue, at the server time the
// message carries, after the waiter's last refused try had run (a try run
// after it would have found the lock held by this token, not refused it).
// That try, sent at s.refused, set the deadline to a.handOff() (the
// liveness timeout) from when it ran, so Redis keeps the lock until at
// least s.refused + a.handOff(). A hand-off dated before the last refusal
// lapsed already: that try found the lock not held by this token. A lease
// that never expires takes a try instead, which makes the lock's expiry
// go.
func (s *waiting) handedOver(ctx context.Context) *Lease {
	if s.w == nil {
		return nil
	}
	g := s.w.Grant()
	ttl := s.a.lock.cfg.ttl
	if g == "" || s.a.handOff() == 0 || ttl == 0 || ctx.Err() != nil {
		return nil
	}
	// "<fence> <server µs>", and for a MutexSet " <member>".
	f, rest, _ := strings.Cut(g, " ")
	t, member, _ := strings.Cut(rest, " ")
	fence, err := strconv.ParseUint(f, 10, 64)
	at, err2 := strconv.ParseInt(t, 10, 64)
	if err != nil || err2 != nil || at < s.refusedAt {
		return nil
	}
	held := min(s.a.handOff(), ttl)
	if !time.Now().Before(watchdog.Deadline(s.refused, held)) {
		return nil
	}
	return s.a.grant(ctx, s.tok, attempt{ok: true, fence: fence, member: member}, s.refused, held, true)
}

// beaten reads a heartbeat's reply, and returns how long to sleep on
// from now (<0: until woken; 0: try now), whether that replaces the sleep
// under way (it does not when the reply tells nothing new), or the stall
// timeout's error. A reply older than the last refusal is stale; a
// transient error is retried with the next heartbeat, another one by a
// try, which reports it.
func (s *waiting) beaten(br beatReply) (time.Duration, bool, error) {
	switch {
	case br.err != nil && transient(br.err):
		s.trouble = br.err
		return 0, false, nil
	case br.err != nil || br.wait == 0:
		return 0, true, nil
	case br.at < s.refusedAt:
		return 0, false, nil
	}
	next, err := s.refusal(br.refusal(), br.sent)
	return next, true, err
}

// refusal takes in r, a refusal by a try or a heartbeat sent at sent,
// and returns how long to sleep (<0: until woken), or the stall timeout's
// error.
func (s *waiting) refusal(r attempt, sent time.Time) (time.Duration, error) {
	s.trouble = nil
	s.refused, s.refusedAt = sent, r.at
	// 0 is "free, but another waiter is first": nobody holds it, so no
	// holder keeps it, and the clock starts again.
	if r.holder == 0 || r.holder != s.holder {
		s.holder, s.stallClock = r.holder, time.Now()
	}
	next := time.Duration(-1)
	if stall := s.a.lock.cfg.stall; stall > 0 {
		next = stall - time.Since(s.stallClock)
		if next <= 0 {
			return 0, fmt.Errorf("%w: %s %q kept by the same holder (fence %d) for %v",
				ErrNotAcquired, s.a.what, s.a.name, s.holder, stall)
		}
	}
	if r.wait >= 0 && (next < 0 || r.wait < next) {
		next = r.wait + time.Millisecond
	}
	if s.a.shared && (next < 0 || next > queueLiveness) {
		// A reader has no heartbeat: behind a writer, look again now and
		// then, in case the lock went with no word (handed on to a
		// writer that then died, whose lease ends long before the one
		// the refusal told of; a FLUSHALL).
		next = queueLiveness
	}
	return next, nil
}

// subscribe registers the waiter for release announcements on channel
// (see acquisition.listensOn) and reports whether it did. A transient
// failure is no error: the waiter then wakes on its timers, and
// subscribes after its next try. A refusal is.
func (s *waiting) subscribe(ctx context.Context, channel string) (bool, error) {
	w, err := subscribeBounded(ctx, s.c, channel, s.tok, s.bell, s.c.open.Done())
	switch {
	case err == nil && w.Detached():
		// Given up before Redis confirmed it (its node is down, or its
		// cluster slot moved), and woken for it: no subscription, as
		// for a transient failure, or that wake-up would end every
		// sleep at once and the waiter would try with no backoff.
		w.Close()
		s.subBackoff = grow(s.subBackoff)
		return false, nil
	case err == nil:
		s.w, s.subBackoff = w, 0
		return true, nil
	case errors.Is(err, notify.ErrClosed):
		return false, errClosedClient
	case ctx.Err() != nil:
		return false, s.a.failedAfter(ctx, ctx.Err(), s.trouble)
	case !transient(err):
		return false, s.a.failed(ctx, err) // refused: an ACL without the channel
	}
	s.subBackoff = grow(s.subBackoff)
	s.trouble = err
	return false, nil
}

// beatWatch is how far off a queued waiter's wake-up may be for it to
// leave the wake-up to its heartbeat, whose reply, every queueHeartbeat,
// tells it anew when the holder's lease runs out: it arms a timer once
// the wake-up is nearer (or a reply failed). Ten thousand waiters on
// holders that renew then keep no timer each.
const beatWatch = 2 * queueHeartbeat

// sleep waits until a release wakes the waiter, next passes (<0: never),
// its heartbeat tells it to try, or ctx or the client ends. Without a
// subscription it wakes by backoff.
func (s *waiting) sleep(ctx context.Context, next time.Duration) error {
	var t *time.Timer // made when a wake-up time is first set
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	wake := s.wakeAt(next)
	beatFailed := false // since then, the timer does not wait for a reply
	for asleep := true; asleep; {
		var expiry <-chan time.Time
		switch {
		case wake.IsZero():
		case s.b != nil && !beatFailed && time.Until(wake) > beatWatch:
			// The next replies move wake; the timer waits until it is near.
		case t == nil:
			t = time.NewTimer(time.Until(wake))
			expiry = t.C
		default:
			t.Reset(time.Until(wake))
			expiry = t.C
		}
		select {
		case <-s.bell:
			if s.w != nil && s.w.Closed() {
				return errClosedClient
			}
			if br, ok := s.beatReply(); ok {
				later, replace, err := s.beaten(br)
				switch {
				case err != nil:
					return err
				case replace && later == 0:
					asleep = false
				case replace:
					wake = s.wakeAt(later)
				default:
					beatFailed = true
				}
			}
			if s.w != nil && s.w.Woken() {
				s.woken, asleep = true, false
			}
		case <-expiry:
			asleep = false
		case <-ctx.Done():
			return s.a.failedAfter(ctx, ctx.Err(), s.trouble)
		case <-s.c.open.Done(): // one not subscribed has no bell Close rings
			return errClosedClient
		}
	}
	if s.w != nil && s.w.Detached() {
		// The hub gave this subscription up (its cluster shard moved):
		// subscribe again after the next try.
		s.w.Close()
		s.w = nil
	}
	return nil
}

// beatReply takes the heartbeat's reply that rang the bell, if any.
func (s *waiting) beatReply() (beatReply, bool) {
	if s.b == nil {
		return beatReply{}, false
	}
	return s.c.beats.take(s.b)
}

// wakeAt is when a sleep of d from now (<0: until woken) ends, zero for
// never; a waiter without a subscription sleeps no longer than its
// backoff before it subscribes again.
func (s *waiting) wakeAt(d time.Duration) time.Time {
	if s.w == nil && (d < 0 || d > s.subBackoff) {
		d = s.subBackoff
	}
	if d < 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// quit ends a wait that failed with err: a wake-up it consumed goes to
// another local waiter, and what it may hold in Redis is given up.
func (s *waiting) quit(ctx context.Context, err error) error {
	if s.woken && s.w != nil {
		s.w.Handoff()
	}
	s.c.giveUp(ctx, s.a, s.tok, s.pending, s.answered)
	return err
}

func (s *waiting) close() {
	if s.waiting {
		s.c.hooks.waitEnd(s.waitCtx, s.a.info())
	}
	if s.w != nil {
		s.w.Close()
	}
	if s.b != nil {
		s.c.beats.leave(s.b)
	}
}

// errClosedClient ends a wait, or a call of one, that the client's Close
// ended.
var errClosedClient = fmt.Errorf("%w: %w", ErrInvalid, notify.ErrClosed)

// grow is the next backoff after one of d: 10ms, doubling up to a second.
func grow(d time.Duration) time.Duration {
	return min(max(2*d, 10*time.Millisecond), time.Second)
}

// either marks what a or b marks (nil: none); it is a, b or a new slice.
func either(a, b []bool) []bool {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	out := make([]bool, len(a))
	for i := range a {
		out[i] = a[i] || b[i]
	}
	return out
}
