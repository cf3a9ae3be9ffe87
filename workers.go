package dlock

import (
	"context"
	"sync"
	"sync/atomic"
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
	// workerStuck is how long a job may run, while no other job ends,
	// before its worker stops counting against maxWorkers. An exchange
	// Redis does not answer (a paused shard, a half-open connection)
	// holds its worker until go-redis' ReadTimeout, whatever its caller's
	// ctx; such workers must not keep calls to other keys or shards
	// waiting. While other jobs end, a long one is taken to be waiting
	// its turn for a connection on a busy machine, and keeps its place.
	workerStuck = 50 * time.Millisecond
)

// workers are the goroutines that run a client's exchanges with Redis
// which their callers may abandon when their ctx ends (see bounded). They
// live on between calls, so that a call costs a hand-over instead of a
// new goroutine; at most maxWorkers run jobs that Redis answers in time,
// so that a burst of calls (ten thousand waiters trying at once) costs a
// queue of callers instead of a goroutine each, which the runtime would
// keep for good. A worker whose job has run for stuck, with no job
// ending in that time, gives its place up and ends with its job: calls
// that Redis leaves unanswered cost a goroutine each, as they would
// without workers.
type workers struct {
	jobs  chan func()   // unbuffered: taken by an idle worker
	slots chan struct{} // one per worker whose job is not stuck
	quit  chan struct{} // closed at the client's Close
	once  sync.Once
	stuck time.Duration // workerStuck; longer in tests
	epoch time.Time     // origin of the times kept as durations since
	ended atomic.Int64  // when a job last ended, since epoch
}

func newWorkers() *workers {
	return &workers{jobs: make(chan func()), slots: make(chan struct{}, maxWorkers), quit: make(chan struct{}), stuck: workerStuck, epoch: time.Now()}
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
// workerIdle or the client is closed. A job that runs past w.stuck while
// no other job ends gives the worker's slot up then, and the worker ends
// after it.
func (w *workers) work(job func()) {
	s := &stint{w: w}
	s.run.Store(1)
	s.began.Store(int64(w.since()))
	s.timer = time.AfterFunc(time.Hour, s.check)
	s.timer.Reset(w.stuck) // now that check can see the timer
	defer s.timer.Stop()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for r := uint64(1); ; r += 2 {
		job()
		w.ended.Store(int64(w.since()))
		if !s.run.CompareAndSwap(r, r+1) {
			return // the slot went when the job ran past w.stuck
		}
		s.timer.Stop()
		if !idle.Stop() {
			select { // a tick from before (Go before 1.23 keeps it)
			case <-idle.C:
			default:
			}
		}
		idle.Reset(workerIdle)
		select {
		case job = <-w.jobs:
			s.began.Store(int64(w.since()))
			s.run.Store(r + 2)
			s.timer.Reset(w.stuck)
		case <-idle.C:
			<-w.slots
			return
		case <-w.quit:
			<-w.slots
			return
		}
	}
}

// since is the time since w.epoch, on the monotonic clock.
func (w *workers) since() time.Duration { return time.Since(w.epoch) }

// A stint is a worker's watch on its jobs: run counts them, odd while
// one runs and even once it ended, or 0 once the worker's slot went; a
// job's end and check race for it with a compare-and-swap.
type stint struct {
	w     *workers
	run   atomic.Uint64
	began atomic.Int64 // when the job began, since w.epoch
	timer *time.Timer  // runs check w.stuck after a job starts
}

// check gives the worker's slot up if its job still runs and no job on
// any worker ended for w.stuck; it looks again later if one did.
func (s *stint) check() {
	r := s.run.Load()
	if r%2 == 0 {
		return // ended, or released
	}
	if quiet := s.w.since() - max(time.Duration(s.w.ended.Load()), time.Duration(s.began.Load())); quiet < s.w.stuck {
		s.timer.Reset(s.w.stuck - quiet) // others end: it waits its turn
		return
	}
	if s.run.CompareAndSwap(r, 0) {
		<-s.w.slots
	}
}

// close lets idle workers end at once, and busy ones after their job;
// later jobs run on goroutines of their own.
func (w *workers) close() {
	w.once.Do(func() { close(w.quit) })
}
