package watchdog

import (
	"context"
	"time"
)

// A Batch renews several leases in one exchange with Redis (a pipeline,
// or one script). It must be comparable, a pointer for instance: the
// loop groups leases by their Batch.
type Batch interface {
	// Renew extends each lease to its TTL and returns one error per
	// renewal, in order, with the meaning of Config.Renew's.
	Renew(ctx context.Context, rs []Renewal) []error
}

// Renewal is one lease's part of a batch: Config.Lease, and the TTL to
// set.
type Renewal struct {
	Lease any
	TTL   time.Duration
}

// window is how early a lease's automatic renewal may be sent to join a
// batch that is going anyway: a sixth of its TTL, so that it is renewed
// every TTL/6 to TTL/3 and a client's leases settle into about one batch
// per TTL/3.
func window(ttl time.Duration) time.Duration { return ttl / 6 }

// renewBatches sends, for each batch in due, one exchange with every
// lease of that batch whose renewal is due within its window.
func (s *state) renewBatches(due map[Batch]bool, now time.Time) {
	groups := map[Batch][]*watch{}
	for _, w := range s.watches {
		b := w.d.cfg.Batch
		if b != nil && due[b] && w.renews() && w.inflight == nil && !w.next.After(now.Add(window(w.ttl))) {
			groups[b] = append(groups[b], w)
		}
	}
	for b, ws := range groups {
		s.renewBatch(b, ws)
	}
}

// renewBatch sends the automatic renewals of ws in one exchange through
// b, bounded by the latest of their renewals' limits.
func (s *state) renewBatch(b Batch, ws []*watch) {
	f := &flight{watches: ws, waiting: len(ws)}
	rs := make([]Renewal, len(ws))
	sent := time.Now()
	var limit time.Time
	for i, w := range ws {
		rs[i] = Renewal{Lease: w.d.cfg.Lease, TTL: w.ttl}
		w.send(&renewal{f: f, sent: sent, ttl: w.ttl})
		if l := earlier(w.deadline, sent.Add(w.ttl/3)); l.After(limit) {
			limit = l
		}
		s.fix(w)
	}
	ctx, cancel := context.WithDeadline(autoContext, limit)
	f.cancel = cancel
	s.flights++
	out := s.outcomes
	go func() { out <- outcome{f, b.Renew(ctx, rs)} }()
}
