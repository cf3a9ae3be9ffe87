package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-dlock/dlock/internal/notify"
)

// Observe returns a channel that receives who leads the election: the
// current leader first (nothing while nobody leads), then every change:
// a new term, a new value (see Leadership.Proclaim), and the zero Leader
// when a term ends with nobody next: a resignation with nobody waiting,
// or a lease that ran out (a dead leader's waiting heir takes the term
// only after that). A term handed to a campaigner that has just died or
// given up is shown until it lets it go or its liveness runs out (at most
// 3s). It never sends an older term after a newer one, and a receiver
// that falls behind gets the latest state, the ones in between skipped. The channel closes when ctx ends or the
// Client is closed; on a Redlock client, or for a bad name, it is closed
// at once, and when Redis refuses for good to announce or tell the
// leader (a user whose ACL lacks the channel or the script) as soon as
// it refuses; the client's logger says why, at Warn or Error level.
//
// Cost: all the observers of one election on a Client share one
// follower, which reads the leader (one round trip) when it starts and
// then once per wake-up, whatever the number of observers. It is woken
// only by the Election's announcements, heard over the Client's one
// shared subscription, and when the leader's lease would run out, which
// a live leader defers with each renewal: about one read per two thirds
// of the leader's TTL while nothing changes (a leader whose renewal
// brings its lease's end nearer announces it). It never polls. While
// Redis cannot be reached it tries again, backing off to once a second.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	if e.err != nil {
		e.c.log.Warn("dlock: cannot observe election", "election", e.name, "err", e.err)
		close(out)
		return out
	}
	e.c.follows.join(ctx, e, &observer{out: out})
	return out
}

// follows are a Client's followers, one per election observed.
type follows struct {
	mu sync.Mutex
	by map[string]*follower // by the election's main key
}

// follower follows one election for all its observers on a Client.
type follower struct {
	e       *Election
	fs      *follows
	cancel  context.CancelFunc // ends run, once the last observer left
	w       waiter             // nil until subscribed (or while subscribing fails)
	bell    chan struct{}      // rung when w is woken or the client closed
	backoff time.Duration      // after a failed subscription or read

	mu        sync.Mutex
	observers map[*observer]func() bool // each with the stop of its ctx's AfterFunc
	cur       Leader                    // the state read last, once read
	read      bool
}

// observer is one Observe call: its channel, the state it was sent last
// and the highest term it was sent.
type observer struct {
	out  chan Leader
	last Leader
	top  uint64
}

// join adds o to the follower of e, starting one if none runs, until
// ctx ends.
func (fs *follows) join(ctx context.Context, e *Election, o *observer) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.by[e.keys.Key()]
	if f == nil {
		fctx, cancel := context.WithCancel(e.c.open)
		f = &follower{e: e, fs: fs, cancel: cancel, bell: make(chan struct{}, 1), observers: map[*observer]func() bool{}}
		fs.by[e.keys.Key()] = f
		go f.run(fctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observers[o] = context.AfterFunc(ctx, func() { fs.leave(f, o) })
	if f.read {
		o.send(f.cur)
	}
}

// leave takes o from f and closes its channel; the last to leave ends f.
func (fs *follows) leave(f *follower, o *observer) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.observers[o]; !ok {
		return
	}
	delete(f.observers, o)
	close(o.out)
	if len(f.observers) == 0 {
		fs.forget(f)
		f.cancel()
	}
}

// forget drops f from the followers, if it is still there. The caller
// holds fs.mu.
func (fs *follows) forget(f *follower) {
	if fs.by[f.e.keys.Key()] == f {
		delete(fs.by, f.e.keys.Key())
	}
}

// end closes every observer's channel: the client was closed.
func (f *follower) end() {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.forget(f)
	f.mu.Lock()
	defer f.mu.Unlock()
	for o, stop := range f.observers {
		stop()
		close(o.out)
	}
	clear(f.observers)
}

// run follows the election until the last observer leaves or the client
// is closed (either ends ctx).
func (f *follower) run(ctx context.Context) {
	defer func() {
		if f.w != nil {
			f.w.Close()
		}
	}()
	for {
		next, ok := f.step(ctx)
		if ok {
			ok = f.sleep(ctx, next)
		}
		if !ok {
			if ctx.Err() == nil || f.e.c.open.Err() != nil {
				f.end() // not the last observer's leaving: the client's closing
			}
			return
		}
	}
}

// step subscribes if needed, reads the leader and passes it on. It
// returns how long to sleep unless woken (<0: until woken), or false
// when the follower must end.
func (f *follower) step(ctx context.Context) (time.Duration, bool) {
	if f.w != nil && f.w.Detached() {
		f.w.Close()
		f.w = nil
	}
	if f.w == nil {
		w, err := subscribeBounded(ctx, f.e.c, f.e.keys.Channel(), notify.Every, f.bell, nil)
		if err != nil {
			return f.failed(ctx, "subscribe", err)
		}
		f.w = w
	}
	ld, ttl, err := f.e.read(ctx)
	if err != nil {
		return f.failed(ctx, "read", err)
	}
	f.backoff = 0
	f.pass(ld)
	if ld.Term == 0 || ttl < 0 {
		return -1, true
	}
	return ttl + time.Millisecond, true
}

// pass records ld and sends it to every observer.
func (f *follower) pass(ld Leader) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur, f.read = ld, true
	for o := range f.observers {
		o.send(ld)
	}
}

// failed backs off after err, or reports that the follower must end:
// ctx ended, the client was closed, or err will not pass by itself.
func (f *follower) failed(ctx context.Context, op string, err error) (time.Duration, bool) {
	if ctx.Err() != nil || errors.Is(err, notify.ErrClosed) {
		return 0, false
	}
	if !transient(err) {
		f.e.c.log.Error("dlock: cannot observe election; its observers' channels are closed",
			"election", f.e.name, "op", op, "err", explain(err))
		return 0, false
	}
	f.backoff = grow(f.backoff)
	f.e.c.log.Debug("dlock: observing failed; retrying", "election", f.e.name, "op", op, "err", err, "in", f.backoff)
	return f.backoff, true
}

// sleep waits for a wake-up or d (<0: no timer), and reports false when
// ctx ended or the client was closed.
func (f *follower) sleep(ctx context.Context, d time.Duration) bool {
	var timer <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-f.bell:
			if f.w == nil {
				continue // rung for a waiter given up
			}
			if f.w.Closed() {
				return false
			}
			if f.w.Woken() {
				return true
			}
		case <-timer:
			return true
		}
	}
}

// send passes ld on unless it is what was sent last or an older term,
// replacing a state the receiver has not taken yet. The caller holds
// the follower's mu, so sends to o never overlap.
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
