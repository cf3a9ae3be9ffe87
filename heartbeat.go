package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/notify"
)

// Join modes of the try scripts of queued waiters (queue_acquire,
// rw_lock, set_acquire, sem_acquire): a TryLock does not join the queue,
// a waiter joins it, and a waiter's heartbeat only renews the place it
// has (all but queue_acquire, whose waiters' heartbeat is queue_beat).
const (
	joinNever = 0
	joinQueue = 1
	joinBeat  = 2
)

// heartbeats keeps the places of a client's waiters alive in their
// queues. Every queueHeartbeat it sends one batch (see sendAll) with the
// heartbeat of each waiter: one round trip per shard, however many wait,
// and one script run per hundred waiters (see merge). A heartbeat renews
// the waiter's place and touches nothing else, so one that arrives late,
// after its waiter took the lock or left, changes nothing: queue_beat for
// a Mutex, FairMutex or Election, the waiter's try in joinBeat mode for
// the others. Its reply, a refused try's, goes to the waiter (see
// waiting.beaten): kept in the beat, with the waiter's bell rung. The
// goroutine that sends the batches runs while the client has waiters.
type heartbeats struct {
	rdb    redis.UniversalClient
	period time.Duration

	mu      sync.Mutex // guards the fields below and each beat's reply
	beats   map[*beat]struct{}
	running bool
}

// beat is one waiter's heartbeat: a's for tok (its call and reply are
// a.beat's and a.parse's).
type beat struct {
	a    *acquisition
	tok  string
	bell chan struct{} // the waiter's, rung when a reply comes
	// reply is the latest reply the waiter has not taken, if fresh.
	reply beatReply
	fresh bool
	// failed says the last heartbeat failed, or had no reply in time
	// (see byMaster).
	failed bool
}

// beatReply is the outcome of a heartbeat sent at sent: a refusal's
// wait, holder and server time (see attempt), or err.
type beatReply struct {
	wait   time.Duration
	holder uint64
	at     int64
	sent   time.Time
	err    error
}

// refusal is the refused try the reply stands for.
func (r beatReply) refusal() attempt {
	return attempt{wait: r.wait, holder: r.holder, at: r.at}
}

func newHeartbeats(rdb redis.UniversalClient) *heartbeats {
	return &heartbeats{rdb: rdb, period: queueHeartbeat, beats: map[*beat]struct{}{}}
}

// join starts the heartbeat of a waiter of a whose try for tok just
// joined it to a queue; bell is rung when a reply comes.
func (h *heartbeats) join(a *acquisition, tok string, bell chan struct{}) *beat {
	b := &beat{a: a, tok: tok, bell: bell}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beats[b] = struct{}{}
	if !h.running {
		h.running = true
		go h.run()
	}
	return b
}

// leave stops b; a batch on its way may still carry it.
func (h *heartbeats) leave(b *beat) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.beats, b)
}

// run sends a batch every period until no waiter is left.
func (h *heartbeats) run() {
	t := time.NewTicker(h.period)
	defer t.Stop()
	for range t.C {
		due, failed, ok := h.due()
		if !ok {
			return
		}
		h.send(due, failed)
	}
}

// due lists the beats the next batch carries, and whether each one's
// last heartbeat failed; !ok (and the loop ends) when no waiter is left.
func (h *heartbeats) due() (due []*beat, failed []bool, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.beats) == 0 {
		h.running = false
		return nil, nil, false
	}
	for b := range h.beats {
		due, failed = append(due, b), append(failed, b.failed)
	}
	return due, failed, true
}

// send sends one batch of beats, one part per master on a Cluster (a
// beat whose last heartbeat failed, as failed says, in a part of its
// own: see byMaster), all at once, and gives each waiter its reply as its
// part is answered. A part not answered within a period is left to
// finish in the background, its replies dropped (each of its waiters is
// told errNoReply), so that a slow or unreachable shard keeps no other
// waiter's reply, nor its next heartbeat, from coming on time.
func (h *heartbeats) send(beats []*beat, failed []bool) {
	ctx, cancel := context.WithTimeout(context.Background(), h.period)
	defer cancel()
	calls := make([]scriptCall, len(beats))
	for i, b := range beats {
		calls[i] = b.a.beat(b.tok)
	}
	perMaster(ctx, h.rdb, calls, failed, func(part []int, sub []scriptCall) {
		h.sendPart(ctx, beats, part, sub)
	})
}

// sendPart sends the beats at part of beats, whose calls are sub, in one
// batch by ctx, and gives each of their waiters its reply.
func (h *heartbeats) sendPart(ctx context.Context, beats []*beat, part []int, sub []scriptCall) {
	sent := time.Now()
	cmds, _, err := untilDone(ctx, nil, func(ctx context.Context) ([]*redis.Cmd, error) {
		return sendAll(ctx, h.rdb, sub), nil
	}, nil, nil)
	replies := make([]beatReply, len(part))
	for j, i := range part {
		replies[j] = beatReply{sent: sent, err: errNoReply}
		if err == nil {
			r, err := beats[i].a.parse(cmds[j].Result())
			replies[j].wait, replies[j].holder, replies[j].at, replies[j].err = r.wait, r.holder, r.at, err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for j, i := range part {
		b := beats[i]
		b.reply, b.fresh, b.failed = replies[j], true, replies[j].err != nil
		notify.Ring(b.bell)
	}
}

// take takes the reply b's waiter has not read, if any.
func (h *heartbeats) take(b *beat) (beatReply, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, fresh := b.reply, b.fresh
	b.reply, b.fresh = beatReply{}, false
	return r, fresh
}
