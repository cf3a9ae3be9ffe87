// Package watchdog keeps a lease alive and says when it is gone.
//
// A Watchdog renews a lease every TTL/3 and serialises every renewal of it,
// automatic or asked for, so that it always knows a lower bound of the
// lease's expiry on the server: a write that set TTL t and was SENT at s
// leaves the lease alive until at least s+t, whenever Redis applied it.
// It declares the lease lost a safety margin before that bound, whether or
// not a renewal call has returned, and at once when a renewal reports the
// lease gone. A Redis that stops answering therefore cannot keep the holder
// believing in a lease that another client may already hold.
package watchdog

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStopped is returned by Refresh once the watchdog has stopped, by Stop
// or because the lease was lost.
var ErrStopped = errors.New("watchdog stopped")

// Config describes the lease to watch.
type Config struct {
	// TTL is the lease's time to live at each renewal, until a Refresh
	// changes it.
	TTL time.Duration
	// Renew extends the lease to ttl. It returns an error for which Gone
	// is true when the lease is no longer the holder's; any other error is
	// retried until the deadline.
	Renew func(ctx context.Context, ttl time.Duration) error
	// Auto renews every TTL/3. Without it the watchdog only renews when
	// asked (Refresh) and declares the lease lost when its TTL runs out.
	Auto bool
	// Gone reports whether an error from Renew means the lease is gone.
	Gone func(error) bool
	// OnLost is called once, from the watchdog's goroutine, when the lease
	// is known lost. It is not called after Stop.
	OnLost func()
	// Drift, if set, is how far the server's clocks may run ahead of ours
	// over a lease of ttl; the lease is declared lost that much earlier
	// (Redlock's clock drift allowance).
	Drift func(ttl time.Duration) time.Duration
}

// Watchdog watches one lease. Its goroutine ends on Stop or loss.
type Watchdog struct {
	cfg      Config
	requests chan request
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	deadline time.Time     // valid once done is closed
	ttl      time.Duration // valid once done is closed
}

// Margin is how long before the bound of the server-side expiry the
// watchdog declares a lease lost: a tenth of the TTL, but at least a
// quarter of it up to 50ms (so that short leases survive the timer delays
// of a loaded machine), and at most one second. It absorbs the holder's
// own scheduling delays.
func Margin(ttl time.Duration) time.Duration {
	return min(max(ttl/10, min(ttl/4, 50*time.Millisecond)), time.Second)
}

// Deadline is when a lease set to ttl by a request sent at sent is declared
// lost unless renewed.
func Deadline(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - Margin(ttl))
}

// Start watches a lease that must be declared lost at deadline unless
// renewed (see Deadline).
func Start(cfg Config, deadline time.Time) *Watchdog {
	return start(cfg, deadline, false)
}

// StartRenewing is Start for a lease whose deadline was reckoned from a
// hold shorter than cfg.TTL (a lock handed over to a waiter): its first
// renewal, to cfg.TTL, is sent at once, with or without Auto. Should it
// fail, the lease is declared lost at deadline unless a later renewal
// gets through.
func StartRenewing(cfg Config, deadline time.Time) *Watchdog {
	return start(cfg, deadline, true)
}

func start(cfg Config, deadline time.Time, renew bool) *Watchdog {
	w := &Watchdog{
		cfg:      cfg,
		requests: make(chan request),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go w.run(deadline, renew)
	return w
}

// Refresh renews the lease to ttl now, after any renewal in progress, and
// makes ttl the TTL of later renewals, whatever the outcome. It returns
// Renew's error, ctx.Err() if ctx ends first (the renewal still counts
// when it completes), or ErrStopped.
func (w *Watchdog) Refresh(ctx context.Context, ttl time.Duration) error {
	req := request{ctx: ctx, ttl: ttl, reply: make(chan error, 1)}
	select {
	case w.requests <- req:
	case <-w.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends the watchdog without calling OnLost, waits for its goroutine
// (not for a renewal in flight, which may hang on an unanswering server),
// and returns the deadline and TTL it had reached, from which a new
// Watchdog can take over. The deadline counts a renewal in flight as one
// that Redis may still apply.
func (w *Watchdog) Stop() (deadline time.Time, ttl time.Duration) {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return w.deadline, w.ttl
}

type request struct {
	ctx   context.Context
	ttl   time.Duration
	reply chan error
}

// attempt is one renewal running in its own goroutine, bounded by the
// deadline, so that a client whose socket timeouts ignore contexts cannot
// hold the watchdog past the lease's end.
type attempt struct {
	sent   time.Time
	ttl    time.Duration
	reply  chan error // the Refresh caller's, if any
	out    chan error
	cancel context.CancelFunc
}

// done returns the attempt's result channel; nil (never ready) for no
// attempt.
func (a *attempt) done() <-chan error {
	if a == nil {
		return nil
	}
	return a.out
}

func (w *Watchdog) start(parent context.Context, ttl time.Duration, deadline time.Time, reply chan error) *attempt {
	ctx, cancel := context.WithDeadline(parent, deadline)
	a := &attempt{sent: time.Now(), ttl: ttl, reply: reply, out: make(chan error, 1), cancel: cancel}
	go func() { a.out <- w.cfg.Renew(ctx, ttl) }()
	return a
}

// watch is the state of a watchdog's goroutine.
type watch struct {
	w        *Watchdog
	ttl      time.Duration // of the next renewal
	deadline time.Time     // when the lease is declared lost unless renewed
	next     time.Time     // when the next automatic renewal is due
	// uncertain is the smallest TTL sent by a renewal that failed since
	// the last success: Redis may have applied it, even after a later
	// write.
	uncertain time.Duration
	inflight  *attempt
	queued    []request // Refresh calls waiting for the renewal in flight
}

// run serves Refresh calls and renewals until Stop or loss; renew sends
// the first renewal at once.
func (w *Watchdog) run(deadline time.Time, renew bool) {
	ttl := w.cfg.TTL
	s := &watch{w: w, ttl: ttl, deadline: deadline, next: deadline.Add(-(ttl - Margin(ttl))).Add(ttl / 3)}
	defer s.finish()
	if renew {
		s.inflight = w.start(context.Background(), ttl, deadline, nil)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		timer.Reset(time.Until(s.wake()))
		var ended bool
		select {
		case <-w.stop:
			return
		case req := <-w.requests:
			s.request(req)
		case err := <-s.inflight.done():
			ended = s.settle(err)
		case <-timer.C:
			ended = s.tick()
		}
		if ended {
			return
		}
	}
}

// wake is when the loop must look again: the deadline, or an automatic
// renewal due before it while none is in flight.
func (s *watch) wake() time.Time {
	if s.w.cfg.Auto && s.inflight == nil && s.next.Before(s.deadline) {
		return s.next
	}
	return s.deadline
}

// request starts a Refresh's renewal, or queues it behind the one in
// flight; its TTL is the TTL of every renewal from now on.
func (s *watch) request(req request) {
	s.ttl = req.ttl
	if s.inflight == nil {
		s.inflight = s.w.start(req.ctx, req.ttl, s.deadline, req.reply)
	} else {
		s.queued = append(s.queued, req)
	}
}

// settle takes in the renewal in flight's outcome, answers its caller,
// starts the next queued one, and reports whether the lease is lost.
func (s *watch) settle(err error) (lost bool) {
	a := s.inflight
	s.inflight = nil
	a.cancel()
	switch {
	case err == nil:
		// The last write to reach Redis is this one or a failed one
		// applied after it: either way sent after a.sent.
		t := a.ttl
		if s.uncertain > 0 {
			t = min(t, s.uncertain)
		}
		s.deadline, s.uncertain = s.w.bound(a.sent, t), 0
		s.next = a.sent.Add(s.ttl / 3)
	case s.w.cfg.Gone(err):
		if a.reply != nil {
			a.reply <- err
		}
		s.w.lost()
		return true
	default:
		s.deadline = earlier(s.deadline, s.w.bound(a.sent, a.ttl))
		if s.uncertain == 0 || a.ttl < s.uncertain {
			s.uncertain = a.ttl
		}
		s.next = time.Now().Add(max(s.ttl/10, 10*time.Millisecond))
	}
	if a.reply != nil {
		a.reply <- err
	}
	if len(s.queued) > 0 {
		q := s.queued[0]
		s.queued = s.queued[1:]
		s.inflight = s.w.start(q.ctx, q.ttl, s.deadline, q.reply)
	}
	return false
}

// tick declares the lease lost at its deadline, or starts an automatic
// renewal when one is due; it reports whether the lease is lost.
func (s *watch) tick() (lost bool) {
	now := time.Now()
	if !now.Before(s.deadline) {
		s.w.lost()
		return true
	}
	if s.w.cfg.Auto && s.inflight == nil && !now.Before(s.next) {
		s.inflight = s.w.start(context.Background(), s.ttl, earlier(s.deadline, now.Add(s.ttl/3)), nil)
	}
	return false
}

// finish answers every caller still waiting and records the deadline and
// TTL reached, counting a renewal in flight as one Redis may still apply
// (its goroutine ends by itself).
func (s *watch) finish() {
	if a := s.inflight; a != nil {
		s.deadline = earlier(s.deadline, s.w.bound(a.sent, a.ttl))
		if a.reply != nil {
			a.reply <- ErrStopped
		}
		a.cancel()
	}
	for _, q := range s.queued {
		q.reply <- ErrStopped
	}
	s.w.deadline, s.w.ttl = s.deadline, s.ttl
	close(s.w.done)
}

func (w *Watchdog) lost() {
	select {
	case <-w.stop:
		return
	default:
	}
	w.cfg.OnLost()
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// bound is the deadline of a write of ttl sent at sent: Deadline, less
// the configured drift.
func (w *Watchdog) bound(sent time.Time, ttl time.Duration) time.Time {
	d := Deadline(sent, ttl)
	if w.cfg.Drift != nil {
		d = d.Add(-w.cfg.Drift(ttl))
	}
	return d
}
