package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/go-dlock/dlock/internal/notify"
)

// Observe returns a channel that receives who leads the election: the
// current leader first (nothing while nobody leads), then every change:
// a new term, a new value (see Leadership.Proclaim), and the zero Leader
// when a term ends with nobody next. It never sends an older term after
// a newer one, and a receiver that falls behind gets the latest state,
// the ones in between skipped. The channel closes when ctx ends or the
// Client is closed; on a Redlock client, or for a bad name, it is closed
// at once (and the client's logger says why).
//
// Cost: an observer reads the leader once (one round trip) when it
// starts and then once per wake-up, and is woken only by the Election's
// announcements, heard over the Client's one shared subscription, and
// when the leader's lease would run out, which a live leader defers with
// each renewal: one read per renewal period of the leader, at most, while
// nothing changes. It never polls. While Redis cannot be reached it
// tries again, backing off to once a second.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	if e.err != nil {
		e.c.log.Warn("dlock: cannot observe election", "election", e.name, "err", e.err)
		close(out)
		return out
	}
	o := &observer{e: e, out: out}
	go o.run(ctx)
	return out
}

// observer is one Observe call's state.
type observer struct {
	e   *Election
	out chan Leader
	w   waiter // nil until subscribed (or while subscribing fails)
	// last is the state last sent, top the highest term sent.
	last    Leader
	top     uint64
	backoff time.Duration // after a failed subscription or read
}

// run follows the election until ctx ends or the client is closed.
func (o *observer) run(ctx context.Context) {
	defer close(o.out)
	defer func() {
		if o.w != nil {
			o.w.Close()
		}
	}()
	for {
		next, ok := o.step(ctx)
		if !ok || !o.sleep(ctx, next) {
			return
		}
	}
}

// step subscribes if needed, reads the leader and sends it if it
// changed. It returns how long to sleep unless woken (<0: until woken),
// or false when the observer must end.
func (o *observer) step(ctx context.Context) (time.Duration, bool) {
	if o.w != nil && o.w.Detached() {
		o.w.Close()
		o.w = nil
	}
	if o.w == nil {
		w, err := subscribeBounded(ctx, o.e.c.listen, o.e.keys.Channel(), notify.Every)
		if err != nil {
			return o.failed(ctx, "subscribe", err)
		}
		o.w = w
	}
	ld, ttl, err := o.e.read(ctx)
	if err != nil {
		return o.failed(ctx, "read", err)
	}
	o.backoff = 0
	o.send(ld)
	if ld.Term == 0 || ttl < 0 {
		return -1, true
	}
	return ttl + time.Millisecond, true
}

// failed backs off after err, or reports that the observer must end.
func (o *observer) failed(ctx context.Context, op string, err error) (time.Duration, bool) {
	if ctx.Err() != nil || errors.Is(err, notify.ErrClosed) {
		return 0, false
	}
	o.backoff = grow(o.backoff)
	log := o.e.c.log.Debug
	if !transient(err) {
		log = o.e.c.log.Warn
	}
	log("dlock: observer failed; retrying", "election", o.e.name, "op", op, "err", err, "in", o.backoff)
	return o.backoff, true
}

// send passes ld on unless it is what was sent last or an older term,
// replacing a state the receiver has not taken yet.
func (o *observer) send(ld Leader) {
	if ld.Value == o.last.Value && ld.Term == o.last.Term && ld.Since.Equal(o.last.Since) {
		return
	}
	if ld.Term != 0 && ld.Term < o.top {
		return
	}
	o.last, o.top = ld, max(o.top, ld.Term)
	select {
	case <-o.out:
	default:
	}
	o.out <- ld
}

// sleep waits for a wake-up or d (<0: no timer), and reports false when
// ctx ended or the client was closed.
func (o *observer) sleep(ctx context.Context, d time.Duration) bool {
	var timer <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	var woken, closed <-chan struct{}
	if o.w != nil {
		woken, closed = o.w.C(), o.w.Done()
	}
	select {
	case <-ctx.Done():
		return false
	case <-closed:
		return false
	case <-woken:
	case <-timer:
	}
	return true
}
