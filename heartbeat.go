package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
// waiting.beaten). The goroutine that sends the batches runs while the
// client has waiters.
type heartbeats struct {
	rdb    redis.UniversalClient
	period time.Duration

	mu      sync.Mutex
	beats   map[*beat]struct{}
	running bool
}

// beat is one waiter's heartbeat.
type beat struct {
	call  scriptCall // queue_beat, or the waiter's try in joinBeat mode
	parse func([]any, error) (attempt, error)
	c     chan beatReply // the latest reply the waiter has not read
}

// beatReply is the outcome of a heartbeat sent at sent.
type beatReply struct {
	r    attempt
	sent time.Time
	err  error
}

func newHeartbeats(rdb redis.UniversalClient) *heartbeats {
	return &heartbeats{rdb: rdb, period: queueHeartbeat, beats: map[*beat]struct{}{}}
}

// join starts the heartbeat of a waiter whose try just joined it to a
// queue: call, read by parse.
func (h *heartbeats) join(call scriptCall, parse func([]any, error) (attempt, error)) *beat {
	b := &beat{call: call, parse: parse, c: make(chan beatReply, 1)}
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
		due, ok := h.due()
		if !ok {
			return
		}
		h.send(due)
	}
}

// due lists the beats the next batch carries; !ok (and the loop ends)
// when no waiter is left.
func (h *heartbeats) due() (due []*beat, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.beats) == 0 {
		h.running = false
		return nil, false
	}
	for b := range h.beats {
		due = append(due, b)
	}
	return due, true
}

// send sends one batch of beats and gives each waiter its reply. A batch
// not answered within a period is left to finish in the background, its
// replies dropped (each waiter is told errNoReply), so that a slow or
// unreachable shard keeps no other waiter's next heartbeat from going on
// time, before its place lapses.
func (h *heartbeats) send(beats []*beat) {
	ctx, cancel := context.WithTimeout(context.Background(), h.period)
	defer cancel()
	calls := make([]scriptCall, len(beats))
	for i, b := range beats {
		calls[i] = b.call
	}
	sent := time.Now()
	cmds, _, err := untilDone(ctx, nil, func(ctx context.Context) ([]*redis.Cmd, error) {
		return sendAll(ctx, h.rdb, calls), nil
	}, nil)
	for i, b := range beats {
		r := beatReply{sent: sent, err: errNoReply}
		if err == nil {
			r.r, r.err = b.parse(cmds[i].Slice())
		}
		b.deliver(r)
	}
}

// deliver replaces the reply b's waiter has not read, if any, with r.
// Only the heartbeats goroutine delivers, so the send never blocks.
func (b *beat) deliver(r beatReply) {
	select {
	case <-b.c:
	default:
	}
	b.c <- r
}
