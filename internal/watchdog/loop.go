package watchdog

import (
	"container/heap"
	"sync"
	"time"
)

// Loop runs watchdogs from one goroutine, which starts with the first
// watch and ends once the last has ended and no renewal is in flight,
// and nothing new came for loopLinger (so that a lock taken and
// released over and over does not start a goroutine each time). A
// client runs all its leases on one Loop, so that holding many costs one
// goroutine and, with a Batch, one exchange per batch of renewals.
//
// The loop's state is under a mutex: a watch starts, stops or asks for a
// renewal from its caller's goroutine, which wakes the loop's only when
// it must look sooner than it meant to.
type Loop struct {
	mu       sync.Mutex
	s        state
	running  bool          // the loop's goroutine is
	sleeping time.Time     // until when the loop's goroutine sleeps; zero while awake
	kick     chan struct{} // look again: a watch is due sooner
}

// NewLoop returns a Loop; it costs nothing until a watch starts.
func NewLoop() *Loop {
	return &Loop{kick: make(chan struct{}, 1), s: state{outcomes: make(chan outcome, 16)}}
}

// Start watches a lease that must be declared lost at deadline unless
// renewed (see Deadline).
func (lp *Loop) Start(cfg Config, deadline time.Time) *Watchdog {
	return lp.start(cfg, deadline, false)
}

// StartRenewing is Start for a lease that Redis keeps for other than
// cfg.TTL until it is renewed: see the function StartRenewing.
func (lp *Loop) StartRenewing(cfg Config, deadline time.Time) *Watchdog {
	return lp.start(cfg, deadline, true)
}

func (lp *Loop) start(cfg Config, deadline time.Time, first bool) *Watchdog {
	d := &Watchdog{loop: lp, cfg: cfg}
	d.w = newWatch(d, deadline, first)
	lp.do(func(s *state) { heap.Push(&s.watches, d.w) })
	return d
}

// do runs f on the loop's state, starting the loop's goroutine if it is
// not running, and waking it if f brought its next look nearer or left
// it idle and sleeping past loopLinger. f must not lose a lease (see
// lose): only the loop's goroutine does.
func (lp *Loop) do(f func(*state)) {
	lp.mu.Lock()
	f(&lp.s)
	kick := false
	switch {
	case !lp.running:
		lp.running = true
		go lp.run()
	case !lp.sleeping.IsZero():
		kick = lp.s.wake().Before(lp.sleeping) ||
			lp.s.idle() && lp.sleeping.After(time.Now().Add(loopLinger)) // to end in time
	}
	lp.mu.Unlock()
	if kick {
		select {
		case lp.kick <- struct{}{}:
		default:
		}
	}
}

// loopLinger is how long a Loop's goroutine waits, idle, for a new watch
// before it ends.
const loopLinger = 100 * time.Millisecond

// run is the loop's goroutine: it serves renewal outcomes and deadlines
// until it has been idle for loopLinger.
func (lp *Loop) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	s := &lp.s
	lingered := false // idle for loopLinger
	for {
		lp.mu.Lock()
		if lingered && s.idle() {
			lp.running = false
			lp.mu.Unlock()
			return
		}
		until := s.wake()
		if s.idle() {
			until = time.Now().Add(loopLinger)
		}
		lp.sleeping = until
		lp.mu.Unlock()
		timer.Reset(time.Until(until))
		var o outcome
		landed, fired := false, false
		select {
		case <-lp.kick:
		case o = <-s.outcomes:
			landed = true
		case <-timer.C:
			fired = true
		}
		lp.mu.Lock()
		lp.sleeping = time.Time{}
		lingered = fired && s.idle()
		switch {
		case landed:
			s.land(o)
		case fired && !lingered:
			s.tick(time.Now())
		}
		losses := s.losses
		s.losses = nil
		lp.mu.Unlock()
		for _, l := range losses {
			l.d.lost(l.cause)
		}
	}
}

// state is the loop's, under its mutex.
type state struct {
	watches  byWake // a heap: the watch to look at next first
	flights  int    // exchanges with Redis whose outcome has not come in
	outcomes chan outcome
	// losses are the leases found lost while the state was changed, to
	// be told once the mutex is let go (see lose).
	losses []loss
}

// loss is a lease found lost, and why.
type loss struct {
	d     *Watchdog
	cause error
}

// idle reports whether the loop has nothing to watch or wait for.
func (s *state) idle() bool { return len(s.watches) == 0 && s.flights == 0 }

// wake is when the loop must look again without being called.
func (s *state) wake() time.Time {
	if len(s.watches) == 0 {
		return time.Now().Add(time.Hour)
	}
	return s.watches[0].wake()
}

// fix puts w back in its place after its times changed.
func (s *state) fix(w *watch) {
	if w.index >= 0 {
		heap.Fix(&s.watches, w.index)
	}
}

// byWake orders watches by when they next need the loop.
type byWake []*watch

// due appends to out the watches in the subheap at i whose wake has come
// by now: a walk that stops at every watch not due, since those below it
// wake later still.
func (h byWake) due(now time.Time, i int, out []*watch) []*watch {
	if i >= len(h) || h[i].wake().After(now) {
		return out
	}
	out = append(out, h[i])
	out = h.due(now, 2*i+1, out)
	return h.due(now, 2*i+2, out)
}

func (h byWake) Len() int           { return len(h) }
func (h byWake) Less(i, j int) bool { return h[i].wake().Before(h[j].wake()) }
func (h byWake) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *byWake) Push(x any) {
	w := x.(*watch)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *byWake) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}
