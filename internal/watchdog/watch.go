package watchdog

import (
	"container/heap"
	"context"
	"errors"
	"time"
)

// watch is the loop's state of one lease.
type watch struct {
	d        *Watchdog
	ttl      time.Duration // of the next renewal
	deadline time.Time     // when the lease is declared lost unless renewed
	next     time.Time     // when the next automatic renewal is due
	// failed says a renewal failed since the last success (a loss at the
	// deadline is then ErrUnconfirmed; see expiry).
	failed bool
	// unsettled is the smallest TTL sent by any renewal whose outcome was
	// never known (it failed, or was abandoned), however long ago: sent
	// before a later success, it may still reach Redis after it, over
	// another connection, and end the lease its TTL from then, sooner
	// than a longer Refresh since made it. Every success counts it.
	unsettled time.Duration
	inflight  *renewal
	// late is the last batched renewal given up at its limit (see
	// abandon) whose success may still come, and count, until another
	// renewal succeeds.
	late   *renewal
	queued []request // Refresh calls waiting for the renewal in flight
	index  int       // in the loop's heap; -1 once the watch ended
	// first is set until the first renewal of a lease that Redis keeps
	// for other than its TTL (see StartRenewing) succeeds: it is sent,
	// Auto or not.
	first bool
}

// newWatch is the state of a lease that must be declared lost at
// deadline unless renewed, and first (see StartRenewing) when Redis keeps
// it for other than the TTL until then. Its first
// renewal is due a third of the way to the deadline: a TTL/3 after the
// acquiring request was sent, or, with first, a third of the time left.
func newWatch(d *Watchdog, deadline time.Time, first bool) *watch {
	ttl := d.cfg.TTL
	w := &watch{d: d, ttl: ttl, deadline: deadline, first: first, index: -1}
	if first {
		w.next = time.Now().Add(time.Until(deadline) / 3)
	} else {
		w.next = deadline.Add(-(ttl - Margin(ttl))).Add(ttl / 3)
	}
	return w
}

// renewal is one lease's renewal in flight, alone or in a batch.
type renewal struct {
	f     *flight
	sent  time.Time
	ttl   time.Duration
	reply chan error // the Refresh caller's, if any
	// limit, for a renewal in a batch, is when the loop stops waiting for
	// it and sends it again (see abandon): a batch's exchange is bounded
	// by the latest of its leases' limits, and go-redis may not even
	// honour that (its reads wait for ReadTimeout unless the client has
	// ContextTimeoutEnabled).
	limit time.Time
}

// flight is one exchange with Redis in flight: one lease's renewal, or a
// batch. It is bounded by a deadline, so that a client whose socket
// timeouts ignore contexts cannot hold a renewal past the lease's end.
type flight struct {
	watches []*watch
	cancel  context.CancelFunc
	// waiting counts the watches that have not ended: once none is left
	// the exchange is cancelled, its outcome of no use to anyone.
	waiting int
}

// leave tells f that one of its watches no longer waits for its outcome;
// once none does, the exchange is cancelled.
func (f *flight) leave() {
	if f.waiting--; f.waiting == 0 {
		f.cancel()
	}
}

// outcome is a flight's result: an error per watch, or for those at part
// (their places in f.watches) when not nil; final when the flight is over,
// its watches with no error reported having had no reply.
type outcome struct {
	f     *flight
	part  []int
	errs  []error
	final bool
}

var (
	errNoReply = errors.New("watchdog: no reply for this lease in its batch")
	// errGivenUp is the failure of a renewal that the loop stopped
	// waiting for (see abandon).
	errGivenUp = errors.New("watchdog: no reply to the renewal in time; renewing again on another connection")
)

// renews reports whether the loop renews w when its renewal is due:
// with Auto, and for the first renewal of a short hold.
func (w *watch) renews() bool { return w.d.cfg.Auto || w.first }

// wake is when the loop must look at w: its deadline, or a renewal due
// before it while none is in flight.
func (w *watch) wake() time.Time {
	switch r := w.inflight; {
	case r != nil && !r.limit.IsZero():
		return earlier(r.limit, w.deadline)
	case w.renews() && r == nil && w.next.Before(w.deadline):
		return w.next
	}
	return w.deadline
}

// renewAlone sends w's renewal to ttl by itself, bounded by limit: the
// loop then stops waiting for it, as for one in a batch (see abandon).
func (s *state) renewAlone(w *watch, ctx context.Context, ttl time.Duration, limit time.Time, reply chan error) {
	f := &flight{watches: []*watch{w}, waiting: 1}
	limit = earlier(limit, w.deadline)
	w.send(&renewal{f: f, sent: time.Now(), ttl: ttl, reply: reply, limit: limit})
	ctx, f.cancel = context.WithDeadline(ctx, limit)
	s.fix(w)
	s.flights++
	renew, out := w.d.cfg.Renew, s.outcomes
	go func() { out <- outcome{f: f, errs: []error{renew(ctx, ttl)}, final: true} }()
}

// send makes r w's renewal in flight. Redis may apply it as soon as it
// is sent, whenever its reply comes, so a TTL that brings the lease's end
// nearer moves the deadline at once: the key may expire, and another
// client take the lock, before the reply says so.
func (w *watch) send(r *renewal) {
	w.inflight = r
	w.deadline = earlier(w.deadline, w.d.bound(r.sent, r.ttl))
}

// request starts a Refresh's renewal, or queues it behind the one in
// flight; its TTL is the TTL of every renewal from now on.
func (s *state) request(w *watch, req request) {
	if w.index < 0 {
		req.reply <- ErrStopped
		return
	}
	w.ttl = req.ttl
	if w.inflight == nil {
		s.renewAlone(w, req.ctx, req.ttl, w.refreshLimit(), req.reply)
	} else {
		w.queued = append(w.queued, req)
	}
}

// refreshLimit is how long the loop waits for a Refresh's renewal before
// it stops waiting (see abandon) and renews again, on another exchange:
// a third of the time left, so that one connection that does not answer
// holds back no renewal until the lease is lost. A lease the loop does
// not renew waits for it until its deadline: nothing would go instead.
func (w *watch) refreshLimit() time.Time {
	if !w.renews() {
		return w.deadline
	}
	return time.Now().Add(time.Until(w.deadline) / 3)
}

// land takes in a flight's outcome for each watch it is about that is
// still waiting for it.
func (s *state) land(o outcome) {
	if o.final {
		s.flights--
		o.f.cancel()
	}
	n := len(o.f.watches)
	if o.part != nil {
		n = len(o.part)
	}
	for j := range n {
		w := o.f.watches[j]
		if o.part != nil {
			w = o.f.watches[o.part[j]]
		}
		err := errNoReply
		if j < len(o.errs) {
			err = o.errs[j]
		}
		switch {
		case w.index < 0:
		case w.inflight != nil && w.inflight.f == o.f:
			o.f.leave()
			s.settle(w, err)
		case w.late != nil && w.late.f == o.f:
			o.f.leave()
			s.landLate(w, err)
		}
	}
}

// landLate takes in the outcome of w's renewal given up at its limit. A
// success moves the deadline as the renewal's would have, every write
// whose outcome is not known (see unsettled; those sent since, failed or
// in flight, too: none has succeeded, or w.late would be gone) counted.
// A loss loses the lease.
func (s *state) landLate(w *watch, err error) {
	r := w.late
	w.late = nil
	switch {
	case err == nil:
		t := min(r.ttl, w.unsettled) // unsettled counts r's TTL since abandon
		if w.inflight != nil {
			t = min(t, w.inflight.ttl)
		}
		if d := w.d.bound(r.sent, t); d.After(w.deadline) {
			w.deadline, w.first = d, false
			s.fix(w)
		}
	case w.d.cfg.Gone(err):
		s.lose(w, err)
	}
}

// settle takes in the outcome of w's renewal in flight, answers its
// caller, starts the next queued one, or ends the watch when the lease is
// gone.
func (s *state) settle(w *watch, err error) {
	r := w.inflight
	w.inflight = nil
	switch {
	case err == nil:
		// The last write to reach Redis is this one, or one whose
		// outcome was never known applied after it (however long ago it
		// was sent: it may have been held back on another connection),
		// which ends the lease no sooner than its TTL after r.sent.
		t := r.ttl
		if w.unsettled > 0 {
			t = min(t, w.unsettled)
		}
		w.deadline, w.failed, w.first = w.d.bound(r.sent, t), false, false
		// Due a third of the way through the TTL this success counts
		// for, which may be shorter than the TTL of later renewals (a
		// failed shorter write, or a longer Refresh queued behind r).
		w.next = r.sent.Add(min(t, w.ttl) / 3)
		if w.late != nil { // sent before r: its outcome tells no more
			w.late.f.leave()
			w.late = nil
		}
	case w.d.cfg.Gone(err):
		if r.reply != nil {
			r.reply <- err
		}
		s.lose(w, err)
		return
	default:
		w.failed = true
		if w.unsettled == 0 || r.ttl < w.unsettled {
			w.unsettled = r.ttl
		}
		// Again in a tenth of the TTL, but well before the deadline,
		// which a success counted with a shorter TTL may have set
		// nearer than the TTL makes it.
		w.next = time.Now().Add(max(min(w.ttl/10, time.Until(w.deadline)/4), 10*time.Millisecond))
	}
	if r.reply != nil {
		r.reply <- err
	}
	if len(w.queued) > 0 {
		q := w.queued[0]
		w.queued = w.queued[1:]
		s.renewAlone(w, q.ctx, q.ttl, w.refreshLimit(), q.reply)
	}
	s.fix(w)
}

// tick declares lost the leases whose deadline has come, and sends the
// automatic renewals that are due: alone, or with the others of their
// batch due soon (see renewBatches).
func (s *state) tick(now time.Time) {
	due := s.watches.due(now, 0, nil)
	var batches map[Batch]bool
	for _, w := range due {
		switch {
		case !now.Before(w.deadline):
			s.lose(w, w.expiry())
		case w.inflight != nil:
			s.abandon(w) // past its limit
		case w.d.cfg.Batch != nil:
			if batches == nil {
				batches = map[Batch]bool{}
			}
			batches[w.d.cfg.Batch] = true
		default:
			s.renewAlone(w, autoContext, w.ttl, earlier(w.deadline, now.Add(w.ttl/3)), nil)
		}
	}
	if len(batches) > 0 {
		s.renewBatches(batches, now)
	}
}

// abandon stops waiting for w's renewal, past its limit: it counts as
// failed (a Refresh's caller is told so), and w's renewal is sent again
// at once, in another exchange; but its success, if it comes, still
// counts (see landLate).
func (s *state) abandon(w *watch) {
	r := w.inflight
	if w.late != nil {
		w.late.f.leave() // the newer one stands for both
	}
	s.settle(w, errGivenUp)
	if w.index < 0 {
		return
	}
	w.late = r
	if w.inflight == nil { // no Refresh went instead
		w.next = time.Now()
		s.fix(w)
	}
}

// lose ends w's watch with a loss for cause. OnLost is called, and the
// watch's done closed, once the loop has let go of its mutex (OnLost may
// call the hooks of the lease's holder, which may start or stop others).
func (s *state) lose(w *watch, cause error) {
	if w.index < 0 {
		return
	}
	s.stop(w)
	s.losses = append(s.losses, loss{w.d, cause})
}

// expiry is the cause of a loss at w's deadline: ErrUnconfirmed if a
// renewal is in flight or failed since the last confirmed, else
// ErrExpired.
func (w *watch) expiry() error {
	if w.inflight != nil || w.failed {
		return ErrUnconfirmed
	}
	return ErrExpired
}

// end is Stop's: it stops watching w (see stop), unless a loss did
// (which Stop came before telling: it never will), and closes its done.
func (s *state) end(w *watch) {
	if w.index >= 0 {
		s.stop(w)
	}
	w.d.finish()
}

// stop removes w from the loop: it answers every caller still waiting and
// records the deadline and TTL reached (a renewal in flight counted, see
// send).
func (s *state) stop(w *watch) {
	heap.Remove(&s.watches, w.index)
	w.d.lapse = w.expiry()
	if r := w.inflight; r != nil {
		if r.reply != nil {
			r.reply <- ErrStopped
		}
		r.f.leave() // its goroutine ends by itself
		w.inflight = nil
	}
	if w.late != nil {
		w.late.f.leave()
		w.late = nil
	}
	for _, q := range w.queued {
		q.reply <- ErrStopped
	}
	w.queued = nil
	w.d.deadline, w.d.ttl = w.deadline, w.ttl
}
