package dlock

import (
	"context"
	"sync"

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
type pipeliner struct {
	rdb      redis.UniversalClient
	once     bool           // sends each command once (see once)
	scripter redis.Scripter // rdb (or once) with EVALSHA through p
	mu       sync.Mutex     // guards queue and flights
	// queue holds the calls waiting for a pipeline, only while all
	// maxPipelines flights are taken; flights counts the pipelines in
	// flight, and the one that lands while calls wait drains the queue.
	queue   []*piped
	flights int
}

// piped is a call in a pipeliner's queue: its command, answered once done
// closes.
type piped struct {
	cmd  *redis.Cmd
	done chan struct{}
}

// newPipeliners returns the pipeliners of a client on rdb, one for calls
// go-redis may send again and one for those sent once; or nils but on a
// single Redis or a Sentinel-managed master (a *redis.Client): a pipeline
// of a Cluster or a Ring waits for every shard it reaches, so that a
// shard that does not answer would hold the calls to the others.
func newPipeliners(rdb redis.UniversalClient) (retried, sentOnce *pipeliner) {
	if _, ok := rdb.(*redis.Client); !ok {
		return nil, nil
	}
	retried, sentOnce = &pipeliner{rdb: rdb}, &pipeliner{rdb: rdb, once: true}
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
		_ = p.rdb.Process(ctx, p.wrap(cmd))
		p.land()
		return
	}
	c := &piped{cmd: cmd, done: make(chan struct{})}
	p.queue = append(p.queue, c) // every flight taken: the first to land sends it
	p.mu.Unlock()
	<-c.done
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

// sendQueued sends the first maxPipelined calls of the queue, if any,
// and answers them. It sends with no caller's ctx: the calls of many go
// in it (a trace hook sees the pipeline without a parent).
func (p *pipeliner) sendQueued() {
	p.mu.Lock()
	n := min(len(p.queue), maxPipelined)
	calls := p.queue[:n:n]
	p.queue = p.queue[n:]
	if len(p.queue) == 0 {
		p.queue = nil
	}
	p.mu.Unlock()
	if n == 0 {
		return
	}
	ctx := context.Background()
	if n == 1 {
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

func (s pipelined) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmd := scriptCmd(ctx, "evalsha", sha1, keys, args)
	s.p.send(ctx, cmd)
	return cmd
}
