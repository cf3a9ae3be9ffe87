package dlock

import (
	"context"
	"sync"
	"time"
)

// Bounds of a client's workers (see workers).
const (
	// maxWorkers is how many of a client's exchanges with Redis run at
	// once on workers: ten times go-redis' default pool on a large
	// machine, past which more would wait for a connection anyway.
	maxWorkers = 256
	// workerIdle is how long a worker with nothing to do lives on.
	workerIdle = time.Second
	// workerStuck is how long a job may run before its worker stops
	// counting against maxWorkers. An exchange Redis does not answer (a
	// paused shard, a half-open connection) holds its worker until
	// go-redis' ReadTimeout, whatever its caller's ctx; such workers must
	// not keep calls to other keys or shards waiting.
	workerStuck = 20 * time.Millisecond
)

// workers are the goroutines that run a client's exchanges with Redis
// which their callers may abandon when their ctx ends (see bounded). They
// live on between calls, so that a call costs a hand-over instead of a
// new goroutine; at most maxWorkers run jobs that Redis answers in time,
// so that a burst of calls (ten thousand waiters trying at once) costs a
// queue of callers instead of a goroutine each, which the runtime would
// keep for good. A worker whose job runs past stuck gives its place up
// at once and ends with its job: calls that Redis leaves unanswered cost
// a goroutine each, as they would without workers.
type workers struct {
	jobs  chan func()   // unbuffered: taken by an idle worker
	slots chan struct{} // one per worker whose job is not stuck
	quit  chan struct{} // closed at the client's Close
	once  sync.Once
	stuck time.Duration // workerStuck; longer in tests
}

func newWorkers() *workers {
	return &workers{jobs: make(chan func()), slots: make(chan struct{}, maxWorkers), quit: make(chan struct{}), stuck: workerStuck}
}

// start has job run on a worker, waiting for one until ctx ends, and
// reports whether job will run. A nil w, or one closed, runs job on a
// goroutine of its own.
func (w *workers) start(ctx context.Context, job func()) bool {
	if w == nil {
		go job()
		return true
	}
	select {
	case w.jobs <- job: // an idle worker first
		return true
	default:
	}
	select {
	case w.jobs <- job:
	case w.slots <- struct{}{}:
		go w.work(job)
	case <-w.quit:
		go job()
	case <-ctx.Done():
		return false
	}
	return true
}

// work runs job, then the jobs handed to it, until it has been idle for
// workerIdle or the client is closed. A job that runs past w.stuck gives
// the worker's slot up then, and the worker ends after it.
func (w *workers) work(job func()) {
	stuck := time.AfterFunc(w.stuck, func() { <-w.slots })
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		if !stuck.Stop() {
			return // the slot went when the job ran past w.stuck
		}
		if !idle.Stop() {
			select { // a tick from before (Go before 1.23 keeps it)
			case <-idle.C:
			default:
			}
		}
		idle.Reset(workerIdle)
		select {
		case job = <-w.jobs:
			stuck.Reset(w.stuck)
		case <-idle.C:
			<-w.slots
			return
		case <-w.quit:
			<-w.slots
			return
		}
	}
}

// close lets idle workers end at once, and busy ones after their job;
// later jobs run on goroutines of their own.
func (w *workers) close() {
	w.once.Do(func() { close(w.quit) })
}
