package dlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds of a pipeliner (see pipeliner).
const (
	// maxPipelines is how many of a pipeliner's pipelines are in flight at
	// once: calls that come while they all are wait for the next, and go
	// in it together.
	maxPipelines = 4
	// maxPipelined is how many calls go in one pipeline at most, so that
	// a burst (ten thousand waiters trying at once) does not hold every
	// caller until the last reply of one long pipeline.
	maxPipelined = 128
)

// pipeliner sends the scripts of a client's calls that come together,
// from many goroutines, in one pipeline: a call that finds maxPipelines
// pipelines in flight waits in a queue, and the first of them to land
// sends what the queue holds (see drain). A call that finds
// nobody waiting goes at once as a command of its own, as it would
// without a pipeliner; under load, one write and one read on each side
// serve a pipeline's calls where each call would take its own, which is
// most of what a small script costs Redis and the client. A caller waits
// for its call's answer whatever its ctx: calls whose ctx can end run on
// the client's workers (see bounded), and a ctx whose deadline go-redis
// honours is not sent through a pipeliner (see Client.scripter).
//
// A queued call that no longer waits is answered without being sent,
// when its pipeline goes or at the latest when it has waited the
// client's PoolTimeout (see sweep): its ctx ended (an abandoned acquire
// must not take a lease or a place nobody will give up), or it has
// waited longer than the PoolTimeout, the longest go-redis lets a
// command wait for a connection (on a Redis that does not answer, a
// pipeline takes a ReadTimeout for each of go-redis' attempts, and ten
// thousand calls queued behind them would otherwise wait for all of
// them in turn).
type pipeliner struct {
	rdb      redis.UniversalClient
	once     bool           // sends each command once (see once)
	scripter redis.Scripter // rdb (or once) with EVALSHA through p
	patience time.Duration  // rdb's PoolTimeout: how long a call may queue
	mu       sync.Mutex     // guards queue, flights, sweeper and sweeping
	// queue holds the calls waiting for a pipeline, only while all
	// maxPipelines flights are taken; flights counts the pipelines in
	// flight, and the one that lands while calls wait drains the queue.
	queue   []*piped
	flights int
	// sweeper, while sweeping, will answer the queued calls that have
	// waited too long (see sweep).
	sweeper  *time.Timer
	sweeping bool
}

// piped is a call in a pipeliner's queue: its command, answered once done
// closes, and its caller's ctx and the time it was queued.
type piped struct {
	cmd    *redis.Cmd
	done   chan struct{}
	ctx    context.Context
	queued time.Time
}

// newPipeliners returns the pipeliners of a client on rdb, one for calls
// go-redis may send again and one for those sent once; or nils but on a
// single Redis or a Sentinel-managed master (a *redis.Client): a pipeline
// of a Cluster or a Ring waits for every shard it reaches, so that a
// shard that does not answer would hold the calls to the others.
func newPipeliners(rdb redis.UniversalClient) (retried, sentOnce *pipeliner) {
	r, ok := rdb.(*redis.Client)
	if !ok {
		return nil, nil
	}
	patience := r.Options().PoolTimeout
	retried, sentOnce = &pipeliner{rdb: rdb, patience: patience}, &pipeliner{rdb: rdb, once: true, patience: patience}
	retried.scripter, sentOnce.scripter = pipelined{rdb, retried}, pipelined{once{rdb}, sentOnce}
	return retried, sentOnce
}

// send has cmd answered, in a pipeline with other calls when they come
// together, and returns when it has been.
func (p *pipeliner) send(ctx context.Context, cmd *redis.Cmd) {
	p.mu.Lock()
	if p.flights < maxPipelines && len(p.queue) == 0 {
		p.flights++ // nobody waits: it goes alone, now
		p.mu.Unlock()
		defer p.land() // also if a hook panics
		_ = p.rdb.Process(ctx, p.wrap(cmd))
		return
	}
	c := &piped{cmd: cmd, done: make(chan struct{}), ctx: ctx, queued: time.Now()}
	p.queue = append(p.queue, c) // every flight taken: the first to land sends it
	p.armSweep(p.patience)
	p.mu.Unlock()
	<-c.done
}

// armSweep has sweep run in d, unless it is due already or p's calls may
// queue for good; p.mu held.
func (p *pipeliner) armSweep(d time.Duration) {
	switch {
	case p.sweeping || p.patience <= 0:
	case p.sweeper == nil:
		p.sweeping, p.sweeper = true, time.AfterFunc(d, p.sweep)
	default:
		p.sweeping = true
		p.sweeper.Reset(d)
	}
}

// sweep answers unsent the queued calls that no longer wait, as the
// next pipeline would, for when none goes (a Redis that does not answer
// holds every flight for go-redis' attempts, each a ReadTimeout), and
// comes again when the oldest call left will have waited too long.
func (p *pipeliner) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	n, _ := p.keepWaiting(len(p.queue), now)
	clear(p.queue[n:])
	p.queue = p.queue[:n]
	p.sweeping = false
	if n > 0 {
		p.armSweep(p.queue[0].queued.Add(p.patience).Sub(now) + time.Millisecond)
	}
}

// land ends a sender's flight, or has the calls that came meanwhile sent
// on another goroutine: its own call answered, its caller goes on.
func (p *pipeliner) land() {
	if p.more() {
		go p.drain()
	}
}

// drain sends the queue until it is empty, as a sender does whose own
// call has been answered.
func (p *pipeliner) drain() {
	for {
		p.sendQueued()
		if !p.more() {
			return
		}
	}
}

// more reports whether calls wait in the queue, keeping the caller's
// flight for them; or ends the flight.
func (p *pipeliner) more() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) > 0 {
		return true
	}
	p.flights--
	return false
}

// sendQueued sends the first maxPipelined calls of the queue still
// waiting, if any, and answers them. It sends with no caller's ctx: the
// calls of many go in it (a trace hook sees the pipeline without a
// parent).
func (p *pipeliner) sendQueued() {
	calls := p.take()
	if len(calls) == 0 {
		return
	}
	ctx := context.Background()
	if len(calls) == 1 {
		_ = p.rdb.Process(ctx, p.wrap(calls[0].cmd))
	} else {
		pipe := p.rdb.Pipeline()
		for _, c := range calls {
			_ = pipe.Process(ctx, p.wrap(c.cmd))
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, c := range calls {
		close(c.done)
	}
}

// take removes from the queue the first maxPipelined calls that still
// wait and returns them, answering unsent, on its way, those that no
// longer do (see pipeliner).
func (p *pipeliner) take() []*piped {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, i := p.keepWaiting(maxPipelined, time.Now())
	calls := p.queue[:n:n]
	clear(p.queue[n:i])
	p.queue = p.queue[i:]
	if len(p.queue) == 0 {
		p.queue = nil
	}
	return calls
}

// keepWaiting moves to the front of the queue, in order, its first calls
// that still wait at now, up to limit of them, answering unsent those
// that no longer do (see answeredStale); it returns how many it kept and
// how many it looked at. p.mu held.
func (p *pipeliner) keepWaiting(limit int, now time.Time) (kept, seen int) {
	for ; seen < len(p.queue) && kept < limit; seen++ {
		if c := p.queue[seen]; !p.answeredStale(c, now) {
			p.queue[kept] = c
			kept++
		}
	}
	return kept, seen
}

// answeredStale answers queued call c unsent and reports true if it is
// no longer to be sent at now: with its ctx's error, or with
// redis.ErrPoolTimeout once it has waited longer than p's patience;
// either wraps errNotSent. p.mu held.
func (p *pipeliner) answeredStale(c *piped, now time.Time) bool {
	err := c.ctx.Err()
	if err == nil && now.Sub(c.queued) > p.patience {
		err = redis.ErrPoolTimeout
	}
	if err == nil {
		return false
	}
	c.cmd.SetErr(fmt.Errorf("%w (%w: waited for a pipeline)", err, errNotSent))
	close(c.done)
	return true
}

// wrap is cmd as p sends it: once, or as go-redis sends any command.
func (p *pipeliner) wrap(cmd *redis.Cmd) redis.Cmder {
	if p.once {
		return sentOnce{cmd}
	}
	return cmd
}

// pipelined is a redis.Scripter whose EVALSHA goes through a pipeliner;
// the rest, an EVAL after NOSCRIPT among them, goes as through direct.
type pipelined struct {
	redis.Scripter
	p *pipeliner
}

// EvalSha sends the script's EVALSHA through s's pipeliner.
func (s pipelined) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmd := scriptCmd(ctx, "evalsha", sha1, keys, args)
	s.p.send(ctx, cmd)
	return cmd
}
