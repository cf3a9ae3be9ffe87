package dlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/notify"
	"github.com/go-dlock/dlock/internal/redistest"
)

// TestWaitersBurstOnFewGoroutines blocks four times maxWorkers waiters at
// once, each on a held Mutex of its own with a ctx that can end: their
// tries and subscriptions run on the client's workers, so the process
// never has much more than a goroutine per waiter (it had two before the
// workers), and every waiter still gets its lock once it is released.
func TestWaitersBurstOnFewGoroutines(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c, holders := New(srv.Client(t)), New(srv.Client(t))
	t.Cleanup(func() { c.Close(); holders.Close() })
	// A loaded machine can keep the first tries waiting for connections
	// past workerStuck; the bound is what this test is about.
	c.work.stuck = time.Hour
	n := 4 * maxWorkers
	held := make([]*Lease, n)
	for i := range n {
		l, err := holders.Mutex(fmt.Sprintf("burst/%d", i)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	base := runtime.NumGoroutine()
	var most atomic.Int64
	sample := make(chan struct{})
	go func() {
		defer close(sample)
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Microsecond) {
			if g := int64(runtime.NumGoroutine()); g > most.Load() {
				most.Store(g)
			}
		}
	}()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			l, err := c.Mutex(fmt.Sprintf("burst/%d", i)).Lock(wctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			errs <- err
		}()
	}
	<-sample
	// Beside the waiters: the workers, the client's loops, the hub's
	// connection, go-redis' and the sampler's.
	if limit := int64(base + n + maxWorkers + 64); most.Load() > limit {
		t.Errorf("%d goroutines at most while %d waiters started (%d before); want at most %d", most.Load(), n, base, limit)
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a waiter: %v", err)
		}
	}
}

// TestWorkersRunAtMostMaxAtOnce starts three times maxWorkers jobs that
// block (and are never taken for stuck): no more than maxWorkers run at
// once, the others wait for a worker, and every one runs once the first
// are let go.
func TestWorkersRunAtMostMaxAtOnce(t *testing.T) {
	w := newWorkers()
	w.stuck = time.Hour
	defer w.close()
	gate := make(chan struct{})
	var running, most, ran atomic.Int64
	var wg sync.WaitGroup
	n := 3 * maxWorkers
	for range n {
		wg.Add(1)
		go func() {
			if !w.start(context.Background(), func() {
				defer wg.Done()
				now := running.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				<-gate
				running.Add(-1)
				ran.Add(1)
			}) {
				t.Error("start refused a job with a ctx that never ends")
				wg.Done()
			}
		}()
	}
	waitFor(t, func() bool { return running.Load() == maxWorkers })
	time.Sleep(50 * time.Millisecond) // time for a worker beyond the bound to show
	if m := most.Load(); m > maxWorkers {
		t.Fatalf("%d jobs ran at once; want at most %d", m, maxWorkers)
	}
	close(gate)
	wg.Wait()
	if got := ran.Load(); got != int64(n) {
		t.Fatalf("%d jobs ran; want %d", got, n)
	}
}

// TestWorkersStuckJobsKeepNoneWaiting fills every worker with a job that
// Redis would leave unanswered (it blocks): a job started after them runs
// once they count as stuck, without waiting for them to end.
func TestWorkersStuckJobsKeepNoneWaiting(t *testing.T) {
	w := newWorkers()
	defer w.close()
	gate := make(chan struct{})
	defer close(gate)
	occupy(w, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 20*w.stuck)
	defer cancel()
	v, _, err := untilDone(ctx, w, func(context.Context) (int, error) { return 1, nil }, nil, nil)
	if err != nil || v != 1 {
		t.Fatalf("a job behind %d stuck ones: (%d, %v); want it run", maxWorkers, v, err)
	}
}

// TestWorkersLongJobsKeepTheirPlaceWhileOthersEnd fills all workers but
// one with jobs that block, while the last one keeps finishing short
// jobs: the long jobs are taken to be waiting their turn (a busy machine,
// a full connection pool), not stuck, and keep their places; once no job
// ends for w.stuck, they give them up.
func TestWorkersLongJobsKeepTheirPlaceWhileOthersEnd(t *testing.T) {
	w := newWorkers()
	w.stuck = 200 * time.Millisecond
	defer w.close()
	gate := make(chan struct{})
	defer close(gate)
	var busy sync.WaitGroup
	for range maxWorkers - 1 {
		busy.Add(1)
		w.start(context.Background(), func() { busy.Done(); <-gate })
	}
	busy.Wait()
	for end := time.Now().Add(5 * w.stuck); time.Now().Before(end); {
		done := make(chan struct{})
		w.start(context.Background(), func() { close(done) })
		<-done
	}
	if n := len(w.slots); n != maxWorkers {
		t.Fatalf("%d workers count toward the bound while short jobs kept ending; want all %d", n, maxWorkers)
	}
	waitFor(t, func() bool { return len(w.slots) <= 1 })
}

// TestWorkersQueuedJobLeavesWithItsCtx has a job wait for a worker while
// all are busy: when its ctx ends it is refused and never runs, and
// untilDone reports ctx's error, marked as never sent, with nothing
// pending.
func TestWorkersQueuedJobLeavesWithItsCtx(t *testing.T) {
	w := newWorkers()
	w.stuck = time.Hour
	defer w.close()
	gate := make(chan struct{})
	occupy(w, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var ran atomic.Bool
	_, finished, err := untilDone(ctx, w, func(context.Context) (int, error) { ran.Store(true); return 1, nil }, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errNotSent) || unanswered(err) || finished != nil {
		t.Fatalf("untilDone = (finished %v, %v); want (nil, the deadline, not sent)", finished, err)
	}
	close(gate)
	w.close()
	time.Sleep(50 * time.Millisecond)
	if ran.Load() {
		t.Fatal("a job refused when its ctx ended ran all the same")
	}
}

// TestUntilDoneAbandonedJobFinishesInTheBackground ends the caller's ctx
// while its job runs: untilDone returns ctx's error at once, with a
// finished channel that closes only once the job has returned, and the
// job's result goes to discard (a registered waiter to undo), not lost;
// a job that ends first delivers its result.
func TestUntilDoneAbandonedJobFinishesInTheBackground(t *testing.T) {
	w := newWorkers()
	defer w.close()
	gate, started := make(chan struct{}), make(chan struct{})
	discarded := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	v, finished, err := untilDone(ctx, w, func(context.Context) (int, error) {
		close(started)
		<-gate
		return 7, nil
	}, func(v int) { discarded <- v }, nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, errNotSent) || finished == nil || v != 0 {
		t.Fatalf("untilDone = (%d, finished %v, %v); want (0, a channel, the cancellation, sent)", v, finished, err)
	}
	select {
	case <-finished:
		t.Fatal("finished closed while the abandoned job still ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	<-finished
	select {
	case got := <-discarded:
		if got != 7 {
			t.Fatalf("discard got %d; want the job's 7", got)
		}
	default:
		t.Fatal("the abandoned job's result was not discarded by the time finished closed")
	}
	v, finished, err = untilDone(context.Background(), w, func(context.Context) (int, error) { return 8, errors.New("eight") }, func(int) { t.Error("a delivered result was discarded") }, nil)
	if v != 8 || err == nil || err.Error() != "eight" || finished != nil {
		t.Fatalf("untilDone = (%d, finished %v, %v); want (8, nil, eight)", v, finished, err)
	}
}

// TestWorkersRunJobsAfterClose checks that a closed pool still runs what
// it is given (a lease's Unlock after its client's Close), and that its
// idle workers end.
func TestWorkersRunJobsAfterClose(t *testing.T) {
	w := newWorkers()
	done := make(chan struct{})
	w.start(context.Background(), func() {})
	w.close()
	w.close() // twice is harmless
	if !w.start(context.Background(), func() { close(done) }) {
		t.Fatal("a closed pool refused a job")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a job given after close did not run")
	}
	waitFor(t, func() bool { return len(w.slots) == 0 })
}

// occupy gives every one of w's workers a job that runs until gate is
// closed, and returns once they all run.
func occupy(w *workers, gate <-chan struct{}) {
	var busy sync.WaitGroup
	for range maxWorkers {
		busy.Add(1)
		w.start(context.Background(), func() { busy.Done(); <-gate })
	}
	busy.Wait()
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPausedShardKeepsOtherShardsServed pauses one master of a Cluster
// while twice maxWorkers callers keep trying locks on it: their calls
// hold workers until go-redis' read timeout, yet calls to locks on the
// other masters still go through within their ctx.
func TestPausedShardKeepsOtherShardsServed(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	rdb := cl.Client(t)
	c := New(rdb)
	t.Cleanup(func() { c.Close() })
	masters := cl.Masters(t)
	paused := masters[0]
	var slow []string
	healthy := ""
	for i := 0; len(slow) < 8 || healthy == ""; i++ {
		name := fmt.Sprintf("shard/%d", i)
		ks, err := c.lockKeys(kindMutex, name)
		if err != nil {
			t.Fatal(err)
		}
		node, err := rdb.MasterForKey(ctx, ks.Key())
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == paused.Addr() {
			slow = append(slow, name)
		} else if healthy == "" {
			healthy = name
		}
	}
	// go-redis loads a ClusterClient's command table from a random node
	// at its first command, and every command waits for it: load it
	// before the pause, which would hold it for a ReadTimeout.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	paused.Pause(t)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			paused.Resume(t)
		}
	}
	defer resume()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * maxWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				_, _ = c.Mutex(slow[i%len(slow)]).TryLock(tctx)
				cancel()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // every worker busy on the paused master
	for range 3 {
		// Half go-redis' ReadTimeout (5s), which the call would wait for
		// if the workers stuck on the paused master kept their slots. It
		// took 2 to 180ms on a quiet machine, but up to a second under
		// the race detector on two busy cores, where its slot comes after
		// those of hundreds of callers of the paused master.
		tctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
		start := time.Now()
		l, err := c.Mutex(healthy).TryLock(tctx)
		if err == nil {
			err = l.Unlock(tctx)
		}
		cancel()
		t.Logf("TryLock+Unlock on a healthy master: %v", time.Since(start))
		if err != nil {
			t.Errorf("a lock on a healthy master while another is paused: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	resume()
	wg.Wait()
}

// TestUntilDoneEndsAtStop: a call given stop (a waiter's, which the
// client's Close ends) returns errClosedClient as soon as stop closes,
// though its ctx never ends and Redis has not answered, and finished
// closes once the job has returned.
func TestUntilDoneEndsAtStop(t *testing.T) {
	w := newWorkers()
	defer w.close()
	gate, stop := make(chan struct{}), make(chan struct{})
	go func() { time.Sleep(10 * time.Millisecond); close(stop) }()
	v, finished, err := untilDone(context.Background(), w, func(context.Context) (int, error) {
		<-gate
		return 7, nil
	}, nil, stop)
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, notify.ErrClosed) || finished == nil || v != 0 {
		t.Fatalf("untilDone = (%d, finished %v, %v); want (0, a channel, the client closed)", v, finished, err)
	}
	close(gate)
	<-finished
}
