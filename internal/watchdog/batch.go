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

// A PartedBatch is a Batch whose renewals go to Redis in parts (one per
// shard of a Cluster): RenewParts reports each part's errors through done
// (the renewals' places in rs, and an error each, with the meaning of
// Renew's) as soon as its replies come, and every part's by the time it
// returns, so that a slow or paused shard holds up the renewals of no
// other.
type PartedBatch interface {
	Batch
	RenewParts(ctx context.Context, rs []Renewal, done func(part []int, errs []error))
}

// Renewal is one lease's part of a batch: Config.Lease, and the TTL to
// set.
type Renewal struct {
	Lease any
	TTL   time.Duration
	// Failed says the lease's last renewal failed, or had no reply in
	// time: a PartedBatch may send it apart from the others, so that
	// whatever held it up holds up no other's.
	Failed bool
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
// b, bounded by the latest of their renewals' limits; each is sent again
// once its own has passed (see abandon).
func (s *state) renewBatch(b Batch, ws []*watch) {
	f := &flight{watches: ws, waiting: len(ws)}
	rs := make([]Renewal, len(ws))
	sent := time.Now()
	var limit time.Time
	for i, w := range ws {
		rs[i] = Renewal{Lease: w.d.cfg.Lease, TTL: w.ttl, Failed: w.failed}
		l := earlier(w.deadline, sent.Add(w.ttl/3))
		w.send(&renewal{f: f, sent: sent, ttl: w.ttl, limit: l})
		if l.After(limit) {
			limit = l
		}
		s.fix(w)
	}
	ctx, cancel := context.WithDeadline(autoContext, limit)
	f.cancel = cancel
	s.flights++
	out := s.outcomes
	pb, parted := b.(PartedBatch)
	if !parted {
		go func() { out <- outcome{f: f, errs: b.Renew(ctx, rs), final: true} }()
		return
	}
	go func() {
		pb.RenewParts(ctx, rs, func(part []int, errs []error) { out <- outcome{f: f, part: part, errs: errs} })
		out <- outcome{f: f, final: true}
	}()
}
