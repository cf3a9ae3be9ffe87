package dlock

import (
	"context"
	"errors"
	"sync"

	"github.com/go-dlock/dlock/internal/notify"
)

// fanIn listens on every node of a Redlock client. A holder releases on
// each node where it holds a share, a majority, so a waiter that listens on
// need = n - majority + 1 nodes hears at least one of those releases: it
// may start waiting once that many subscriptions are confirmed, and the
// rest join as they come (a node that is down costs nothing).
type fanIn struct {
	hubs []*notify.Hub
	need int
}

// fanWaiter merges one waiter per node: every node's waiter rings the
// same bell.
type fanWaiter struct {
	bell   chan struct{}
	hub    *notify.Hub     // the first node's: closed with the others
	ctx    context.Context // ends at Close: stops the subscriptions under way
	stop   context.CancelFunc
	mu     sync.Mutex
	parts  []*notify.Waiter
	closed bool
}

func (f *fanIn) newWaiter(bell chan struct{}) (*fanWaiter, context.Context) {
	ctx, stop := context.WithCancel(context.Background())
	return &fanWaiter{bell: bell, hub: f.hubs[0], ctx: ctx, stop: stop}, ctx
}

func (f *fanIn) join(channel, tok string, bell chan struct{}) waiter {
	parts := make([]*notify.Waiter, len(f.hubs))
	joined := 0
	for i, h := range f.hubs {
		if parts[i] = h.Join(channel, tok, bell); parts[i] != nil {
			joined++
		}
	}
	if joined < f.need {
		for _, p := range parts {
			if p != nil {
				p.Close()
			}
		}
		return nil
	}
	w, ctx := f.newWaiter(bell)
	for i, p := range parts {
		if p != nil {
			w.attach(p)
		} else {
			w.subscribeLater(ctx, f.hubs[i], channel, tok, nil)
		}
	}
	return w
}

func (f *fanIn) subscribe(ctx context.Context, channel, tok string, bell chan struct{}) (waiter, error) {
	w, wctx := f.newWaiter(bell)
	// One report per hub: whether its subscription is in place.
	reports := make(chan error, len(f.hubs))
	for _, h := range f.hubs {
		w.subscribeLater(wctx, h, channel, tok, reports)
	}
	var ok int
	var last error
	for range f.hubs {
		select {
		case err := <-reports:
			if err != nil {
				last = err
				continue
			}
			if ok++; ok >= f.need {
				return w, nil
			}
		case <-ctx.Done():
			w.Close()
			return nil, ctx.Err()
		}
	}
	if ok == 0 && errors.Is(last, notify.ErrClosed) {
		w.Close()
		return nil, last
	}
	// Too few subscriptions: the waiter relies on its own expiry wake-ups
	// meanwhile.
	return w, nil
}

// subscribeLater subscribes on h in the background, attaches the waiter it
// gets, and reports the outcome on report if not nil. Close does not wait
// for it: a node that does not answer may hold it for the client's read
// timeout, and its waiter, once it comes, is closed at once.
func (w *fanWaiter) subscribeLater(ctx context.Context, h *notify.Hub, channel, tok string, report chan<- error) {
	go func() {
		p, err := h.Subscribe(ctx, channel, tok, w.bell)
		if err == nil && !w.attach(p) {
			p.Close()
		}
		if report != nil {
			report <- err
		}
	}()
}

// attach adds one node's waiter; false when the fan-in waiter is closed
// already.
func (w *fanWaiter) attach(p *notify.Waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.parts = append(w.parts, p)
	return true
}

// Woken takes every node's wake-up, and reports whether there was one.
func (w *fanWaiter) Woken() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	woken := false
	for _, p := range w.parts {
		woken = p.Woken() || woken
	}
	return woken
}

func (w *fanWaiter) Closed() bool {
	select {
	case <-w.hub.Done():
		return true
	default:
		return false
	}
}

// Handoff passes the wake-up on, on every node: which one woke this waiter
// is not kept, and an extra wake-up costs another waiter a try, no more.
func (w *fanWaiter) Handoff() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.parts {
		p.Handoff()
	}
}

// Grant is always "": a Redlock release frees its shares and wakes, it
// never hands the lock over.
func (w *fanWaiter) Grant() string { return "" }

// Detached reports whether any node gave its subscription up.
func (w *fanWaiter) Detached() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.parts {
		if p.Detached() {
			return true
		}
	}
	return false
}

// Close closes every node's waiter, each passing a wake-up it had not
// given on to another waiter of its node.
func (w *fanWaiter) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Closed first: a subscription that comes in from now on is not
	// attached.
	w.closed = true
	w.stop()
	for _, p := range w.parts {
		p.Close()
	}
	w.parts = nil
}
