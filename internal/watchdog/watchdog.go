// Package watchdog keeps leases alive and says when they are gone.
//
// A Watchdog renews a lease every TTL/3 and serialises every renewal of it,
// automatic or asked for, so that it always knows a lower bound of the
// lease's expiry on the server: a write that set TTL t and was SENT at s
// leaves the lease alive until at least s+t, whenever Redis applied it.
// It declares the lease lost a safety margin before that bound, whether or
// not a renewal call has returned, and at once when a renewal reports the
// lease gone. A Redis that stops answering therefore cannot keep the holder
// believing in a lease that another client may already hold.
//
// Watchdogs run on a Loop: one goroutine for all the leases of a client,
// however many. Leases that share a Batch have their automatic renewals
// sent together, one exchange for all those due at about the same time
// (see Batch).
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

// The causes OnLost is given when a lease's deadline passed: ErrUnconfirmed
// when a renewal was sent since the last one confirmed (it failed, or no
// reply came in time), ErrExpired when none was (automatic renewal is off,
// or the holder's process stalled).
var (
	ErrUnconfirmed = errors.New("lease deadline passed with its renewal unconfirmed")
	ErrExpired     = errors.New("lease deadline passed with no renewal sent")
)

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
	// OnLost is called once, from the loop's goroutine, when the lease is
	// known lost, with the cause: the error of a renewal that found it gone
	// (see Gone), ErrUnconfirmed or ErrExpired. It must not block. It is
	// not called after Stop.
	OnLost func(cause error)
	// Drift, if set, is how far the server's clocks may run ahead of ours
	// over a lease of ttl; the lease is declared lost that much earlier
	// (Redlock's clock drift allowance).
	Drift func(ttl time.Duration) time.Duration
	// Batch, if set, sends this lease's automatic renewals together with
	// those of the other leases of the same Batch that are due within a
	// sixth of their TTL; Lease is what Batch is given for this lease.
	// Refresh still goes alone, through Renew.
	Batch Batch
	Lease any
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

// Watchdog watches one lease, from its Loop's goroutine, until Stop or
// loss.
type Watchdog struct {
	loop *Loop
	cfg  Config
	w    *watch // the loop's state of the lease, under the loop's mutex
	// once is Stop's or the loss's, whichever comes first: OnLost is
	// not called after Stop, and a Stop during OnLost waits for it.
	once sync.Once
	// done, under the loop's mutex, is closed once the watch has ended
	// (see ended): made only for a caller that waits before then, and
	// otherwise set to Closed at the end, so that a lease that ends
	// by Stop, as most do, costs no channel.
	done chan struct{}
	// deadline, ttl and lapse are valid once done is closed.
	deadline time.Time
	ttl      time.Duration
	lapse    error
}

// defaultLoop runs the watchdogs started by Start and StartRenewing.
var defaultLoop = NewLoop()

// Start watches, on a loop shared by the process, a lease that must be
// declared lost at deadline unless renewed (see Deadline).
func Start(cfg Config, deadline time.Time) *Watchdog {
	return defaultLoop.Start(cfg, deadline)
}

// StartRenewing is Start for a lease that Redis keeps for other than
// cfg.TTL until it is renewed (a lock handed over to a waiter, held for
// the hand-off window: its deadline reckoned from a hold shorter than
// cfg.TTL, or its key kept past a shorter cfg.TTL): its first
// renewal, to cfg.TTL, is sent with or without Auto, a third of the way
// from now to deadline, and retried as automatic renewals are until it
// succeeds; without Auto, none follows. A lease stopped before then costs
// no renewal. Until the first succeeds, the lease is declared lost at
// deadline.
func StartRenewing(cfg Config, deadline time.Time) *Watchdog {
	return defaultLoop.StartRenewing(cfg, deadline)
}

// Refresh renews the lease to ttl now, after any renewal in progress, and
// makes ttl the TTL of later renewals, whatever the outcome. It returns
// Renew's error, ctx.Err() if ctx ends first (the renewal still counts
// when it completes), or ErrStopped.
func (d *Watchdog) Refresh(ctx context.Context, ttl time.Duration) error {
	done := d.ended()
	select {
	case <-done:
		return ErrStopped
	default:
	}
	req := request{ctx: ctx, ttl: ttl, reply: make(chan error, 1)}
	d.loop.do(func(s *state) { s.request(d.w, req) })
	select {
	case err := <-req.reply:
		if err == ErrStopped {
			// Stopped by a loss, perhaps: told (OnLost) before this.
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends the watch without calling OnLost (it waits for an OnLost
// call under way, not for a renewal in flight, which may hang on an
// unanswering server), and returns the deadline and TTL it had reached,
// from which a new Watchdog can take over. The deadline counts a renewal
// in flight as one that Redis may still apply.
func (d *Watchdog) Stop() (deadline time.Time, ttl time.Duration) {
	ended := false
	d.once.Do(func() {
		d.loop.do(func(s *state) { s.end(d.w) })
		ended = true // here: no wait, and no channel
	})
	if !ended {
		<-d.ended() // a loss's OnLost came first
	}
	return d.deadline, d.ttl
}

// Lapse returns, once the watch has ended, the cause a loss at the
// deadline it reached would have had: ErrUnconfirmed or ErrExpired.
func (d *Watchdog) Lapse() error {
	<-d.ended()
	return d.lapse
}

// ended returns a channel that is closed once the watch has ended.
func (d *Watchdog) ended() <-chan struct{} {
	d.loop.mu.Lock()
	defer d.loop.mu.Unlock()
	if d.done == nil {
		d.done = make(chan struct{})
	}
	return d.done
}

// finish closes done, or makes it Closed when nobody waits yet; the
// caller holds the loop's mutex.
func (d *Watchdog) finish() {
	if d.done == nil {
		d.done = Closed
		return
	}
	close(d.done)
}

// Closed is a channel closed from the start: done for a watch that
// ended before anyone waited, and any other channel made only when asked
// for (a lease's Lost()) that closed before it was.
var Closed = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// lost calls OnLost with cause, and then closes done, unless Stop came
// first (which closes done itself).
func (d *Watchdog) lost(cause error) {
	told := false
	d.once.Do(func() {
		told = true
		d.cfg.OnLost(cause)
	})
	if told {
		d.loop.mu.Lock()
		d.finish()
		d.loop.mu.Unlock()
	}
}

// Config returns the watch's configuration, for a Watchdog that takes
// over from it once it stopped.
func (d *Watchdog) Config() Config { return d.cfg }

// automatic marks the contexts of automatic renewals.
type automatic struct{}

// Automatic reports whether ctx is one the watchdog made for an automatic
// renewal, rather than one derived from a Refresh caller's.
func Automatic(ctx context.Context) bool { return ctx.Value(automatic{}) != nil }

// autoContext is the parent of automatic renewals' contexts.
var autoContext = context.WithValue(context.Background(), automatic{}, true)

// bound is the deadline of a write of ttl sent at sent: Deadline, less
// the configured drift.
func (d *Watchdog) bound(sent time.Time, ttl time.Duration) time.Time {
	b := Deadline(sent, ttl)
	if d.cfg.Drift != nil {
		b = b.Add(-d.cfg.Drift(ttl))
	}
	return b
}

// request is a Refresh call.
type request struct {
	ctx   context.Context
	ttl   time.Duration
	reply chan error
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
