// Package watchdog keeps a lease alive and says when it is gone.
//
// A Watchdog renews a lease every TTL/3. It declares the lease lost when a
// renewal reports it gone, or when no renewal has succeeded in time: the
// lease on the server lasts at least TTL from the moment the last
// successful renewal was SENT, so the watchdog gives up a safety margin
// before that instant, whether or not the renewal call has returned. A
// Redis that stops answering therefore cannot keep the holder believing in
// a lease that another client may already hold.
package watchdog

import (
	"context"
	"sync"
	"time"
)

// Config describes the lease to watch.
type Config struct {
	// TTL is the lease's time to live at each renewal.
	TTL time.Duration
	// Renew extends the lease to TTL. It returns Gone when the lease is no
	// longer the holder's; any other error is retried until the deadline.
	// Nil disables renewal: the watchdog then only declares the lease lost
	// when its TTL runs out.
	Renew func(ctx context.Context, ttl time.Duration) error
	// Gone reports whether an error from Renew means the lease is gone.
	Gone func(error) bool
	// OnLost is called once, from the watchdog's goroutine, when the lease
	// is known lost. It is not called after Stop.
	OnLost func()
}

// Watchdog renews one lease. Its goroutine ends on Stop or loss.
type Watchdog struct {
	cfg     Config
	stop    chan struct{}
	renewed chan renewal
	done    chan struct{}
	once    sync.Once
}

// Margin is how long before the server-side expiry the watchdog declares a
// lease lost: a tenth of the TTL, at most one second. It absorbs the
// holder's own scheduling delays.
func Margin(ttl time.Duration) time.Duration {
	return min(ttl/10, time.Second)
}

// Start watches a lease acquired by a request sent at sent.
func Start(cfg Config, sent time.Time) *Watchdog {
	w := &Watchdog{
		cfg:     cfg,
		stop:    make(chan struct{}),
		renewed: make(chan renewal, 1),
		done:    make(chan struct{}),
	}
	go w.run(sent)
	return w
}

// Renewed tells the watchdog that the lease was extended to ttl by a
// request sent at sent (a manual Refresh). Later renewals use ttl.
func (w *Watchdog) Renewed(sent time.Time, ttl time.Duration) {
	r := renewal{sent: sent, ttl: ttl}
	for {
		select {
		case w.renewed <- r:
			return
		case <-w.done:
			return
		default:
		}
		// Replace an older, unread renewal with this newer one.
		select {
		case <-w.renewed:
		default:
		}
	}
}

// Stop ends the watchdog without calling OnLost, and waits for it.
func (w *Watchdog) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

type renewal struct {
	sent time.Time
	ttl  time.Duration
}

type result struct {
	sent time.Time
	err  error
}

func (w *Watchdog) run(sent time.Time) {
	defer close(w.done)
	ttl := w.cfg.TTL
	deadline := sent.Add(ttl - Margin(ttl))
	next := sent.Add(ttl / 3)

	var inflight *attempt // the renewal in progress, if any
	defer func() {
		if inflight != nil {
			inflight.cancel()
			<-inflight.out
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wake := deadline
		if w.cfg.Renew != nil && inflight == nil && next.Before(deadline) {
			wake = next
		}
		timer.Reset(time.Until(wake))
		select {
		case <-w.stop:
			return
		case r := <-w.renewed:
			ttl = r.ttl
			deadline = later(deadline, r.sent.Add(ttl-Margin(ttl)))
			next = r.sent.Add(ttl / 3)
			continue
		case r := <-inflight.done():
			inflight.cancel()
			inflight = nil
			switch {
			case r.err == nil:
				deadline = later(deadline, r.sent.Add(ttl-Margin(ttl)))
				next = r.sent.Add(ttl / 3)
			case w.cfg.Gone(r.err):
				w.lost()
				return
			default:
				next = time.Now().Add(max(ttl/10, 10*time.Millisecond))
			}
			continue
		case <-timer.C:
		}
		now := time.Now()
		if !now.Before(deadline) {
			w.lost()
			return
		}
		if w.cfg.Renew != nil && inflight == nil && !now.Before(next) {
			inflight = w.renew(now, earlier(deadline, now.Add(ttl/3)), ttl)
		}
	}
}

// attempt is one renewal running in its own goroutine, bounded by a
// deadline, so that a client whose socket timeouts ignore contexts cannot
// hold the watchdog past the lease's end.
type attempt struct {
	out    chan result
	cancel context.CancelFunc
}

// done returns the attempt's result channel; nil (never ready) for no
// attempt.
func (a *attempt) done() <-chan result {
	if a == nil {
		return nil
	}
	return a.out
}

func (w *Watchdog) renew(sent, deadline time.Time, ttl time.Duration) *attempt {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	a := &attempt{out: make(chan result, 1), cancel: cancel}
	go func() { a.out <- result{sent: sent, err: w.cfg.Renew(ctx, ttl)} }()
	return a
}

func (w *Watchdog) lost() {
	select {
	case <-w.stop:
		return
	default:
	}
	w.cfg.OnLost()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
