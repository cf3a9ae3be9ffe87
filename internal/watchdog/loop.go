package watchdog

import (
	"container/heap"
	"sync"
	"time"
)

// Loop runs watchdogs from one goroutine, which starts with the first
// watch and ends once the last has ended and no renewal is in flight. A
// client runs all its leases on one Loop, so that holding many costs one
// goroutine and, with a Batch, one exchange per batch of renewals.
type Loop struct {
	mu      sync.Mutex
	calls   []func(*state) // for the loop's goroutine, in order
	running bool
	kick    chan struct{} // there are calls
}

// NewLoop returns a Loop; it costs nothing until a watch starts.
func NewLoop() *Loop {
	return &Loop{kick: make(chan struct{}, 1)}
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
	d := &Watchdog{loop: lp, cfg: cfg, done: make(chan struct{})}
	d.w = newWatch(d, deadline, first)
	lp.do(func(s *state) { heap.Push(&s.watches, d.w) })
	return d
}

// do has the loop's goroutine run f, starting the goroutine if needed. It
// never blocks on the loop.
func (lp *Loop) do(f func(*state)) {
	lp.mu.Lock()
	lp.calls = append(lp.calls, f)
	if !lp.running {
		lp.running = true
		go lp.run()
	}
	lp.mu.Unlock()
	select {
	case lp.kick <- struct{}{}:
	default:
	}
}

// take returns the calls queued for the loop, or reports that it ends:
// none are queued and, by idle, it has nothing left to do.
func (lp *Loop) take(idle bool) (calls []func(*state), end bool) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	calls, lp.calls = lp.calls, nil
	if len(calls) == 0 && idle {
		lp.running = false
		return nil, true
	}
	return calls, false
}

// run is the loop's goroutine: it serves calls, renewal outcomes and
// deadlines until it is idle.
func (lp *Loop) run() {
	s := &state{outcomes: make(chan outcome, 16)}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		calls, end := lp.take(s.idle())
		if end {
			return
		}
		if len(calls) > 0 {
			for _, f := range calls {
				f(s)
			}
			continue // they may have left the loop idle
		}
		timer.Reset(time.Until(s.wake()))
		select {
		case <-lp.kick:
		case o := <-s.outcomes:
			s.land(o)
		case <-timer.C:
			s.tick(time.Now())
		}
	}
}

// state is what the loop's goroutine alone reads and writes.
type state struct {
	watches  byWake // a heap: the watch to look at next first
	flights  int    // exchanges with Redis whose outcome has not come in
	outcomes chan outcome
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
