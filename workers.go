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
)

// workers are the goroutines that run a client's exchanges with Redis
// which their callers may abandon when their ctx ends (see bounded). They
// live on between calls, so that a call costs a hand-over instead of a
// new goroutine; at most maxWorkers run, so that a burst of calls (ten
// thousand waiters trying at once) costs a queue of callers instead of a
// goroutine each, which the runtime would keep for good.
type workers struct {
	jobs  chan func()   // unbuffered: taken by an idle worker
	slots chan struct{} // one per live worker
	quit  chan struct{} // closed at the client's Close
	once  sync.Once
}

func newWorkers() *workers {
	return &workers{jobs: make(chan func()), slots: make(chan struct{}, maxWorkers), quit: make(chan struct{})}
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
// workerIdle or the client is closed.
func (w *workers) work(job func()) {
	defer func() { <-w.slots }()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(workerIdle)
		select {
		case job = <-w.jobs:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}

// close lets idle workers end at once, and busy ones after their job;
// later jobs run on goroutines of their own.
func (w *workers) close() {
	w.once.Do(func() { close(w.quit) })
}
