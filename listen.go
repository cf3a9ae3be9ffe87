package dlock

import (
	"context"

	"github.com/go-dlock/dlock/internal/notify"
)

// waiter is one blocked caller's registration for release announcements:
// a notify.Waiter on one Redis, or, on a Redlock client, one per node. Its
// wake-ups ring the bell it was registered with (see notify.Waiter).
type waiter interface {
	// Woken takes the wake-up given since the last call: whether the
	// caller should try again.
	Woken() bool
	// Closed reports that the client was closed.
	Closed() bool
	// Handoff passes a taken wake-up on to another local waiter.
	Handoff()
	// Close unregisters the waiter.
	Close()
	// Detached reports that the subscription was given up and the waiter
	// must subscribe again.
	Detached() bool
	// Grant takes what the last wake-up handed over besides waking: a
	// queue's "<fence> <server µs>" (see hand_over in lua/lib/waiters.lua),
	// or "".
	Grant() string
}

// listener registers waiters on a lock's release channel, each rung by
// bell, a channel of capacity one.
type listener interface {
	// join registers a waiter without network traffic if a confirmed
	// subscription to channel exists, and returns nil otherwise.
	join(channel, tok string, bell chan struct{}) waiter
	// subscribe registers a waiter and returns once a release announced
	// from now on will reach it.
	subscribe(ctx context.Context, channel, tok string, bell chan struct{}) (waiter, error)
}

// hubListener is the listener of a client on one Redis deployment.
type hubListener struct{ hub *notify.Hub }

func (l hubListener) join(channel, tok string, bell chan struct{}) waiter {
	if w := l.hub.Join(channel, tok, bell); w != nil {
		return w
	}
	return nil
}

func (l hubListener) subscribe(ctx context.Context, channel, tok string, bell chan struct{}) (waiter, error) {
	w, err := l.hub.Subscribe(ctx, channel, tok, bell)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// subscribeBounded is c's listener's subscribe returning by ctx's end
// (and, with stop, as soon as stop closes: see untilDone), run on one of
// c's workers: the hub may wait for a dial or for another subscription's
// command on go-redis' own timeouts. A waiter registered after ctx ended
// is closed, so that no release announcement is spent on it. A Redlock
// client's fan-in returns by ctx's end by itself.
func subscribeBounded(ctx context.Context, c *Client, channel, tok string, bell chan struct{}, stop <-chan struct{}) (waiter, error) {
	if ctx.Done() == nil && stop == nil || c.nodes != nil {
		return c.listen.subscribe(ctx, channel, tok, bell)
	}
	subscribe := func(ctx context.Context) (waiter, error) { return c.listen.subscribe(ctx, channel, tok, bell) }
	w, _, err := untilDone(ctx, c.work, subscribe, func(w waiter) {
		if w != nil {
			w.Close()
		}
	}, stop)
	return w, err
}
