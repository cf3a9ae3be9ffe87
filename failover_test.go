package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
)

// Bounds for the tests that fail Redis over under a lock. Generous: a
// failover takes seconds, and the machine may be loaded.
const (
	// lockBound is the longest one Lock may wait during a failover run:
	// past it the waiter is taken to hang.
	lockBound = 25 * time.Second
	// settle is how long after the new master was confirmed errors are
	// still tolerated (clients learn the new topology).
	settle = 3 * time.Second
	// afterFailover is how long contention goes on after the failover.
	afterFailover = 3 * time.Second
	// maxGap is the longest the lock may go without an acquisition after
	// the failover: a lease lost with the old master runs out (TTLs in
	// these tests are at most 3s), and a waiter whose wake-up went astray
	// tries again on its heartbeat (1s).
	maxGap = 6 * time.Second
)

// span is one acquisition in a contention run: the lock was held from
// after Lock returned (from) until before Unlock was called (to).
type span struct {
	worker   int
	fence    uint64
	from, to time.Time
	lost     bool // Lost() closed, or Unlock said ErrLost
	// waited is how long Lock took, unlocked how long Unlock took.
	waited, unlocked time.Duration
}

// failoverRun records what contending workers saw across a failover.
type failoverRun struct {
	mu    sync.Mutex
	spans []span
	errs  []stampedErr
	wg    sync.WaitGroup
}

type stampedErr struct {
	at  time.Time
	err error
}

func (r *failoverRun) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, stampedErr{time.Now(), err})
	r.mu.Unlock()
}

// contendAcross starts workers goroutines that take lock(i) in turn,
// holding it for hold, until ctx ends. A Lock that errs is recorded and
// retried; one that waits lockBound is recorded as a hang. Call wait.
func contendAcross(ctx context.Context, workers int, lock func(i int) dlock.Locker, hold time.Duration) *failoverRun {
	r := &failoverRun{}
	for i := range workers {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			l := lock(i)
			for ctx.Err() == nil {
				lctx, cancel := context.WithTimeout(ctx, lockBound)
				called := time.Now()
				lease, err := l.Lock(lctx)
				hung := lctx.Err() != nil && ctx.Err() == nil
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if hung {
						err = fmt.Errorf("worker %d: Lock hung for %v: %w", i, lockBound, err)
					}
					r.fail(err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				s := span{worker: i, fence: lease.Fence(), from: time.Now()}
				s.waited = s.from.Sub(called)
				select {
				case <-lease.Lost():
				case <-time.After(hold):
				}
				s.to = time.Now()
				s.lost = unlockAcross(lease) != nil
				s.unlocked = time.Since(s.to)
				r.mu.Lock()
				r.spans = append(r.spans, s)
				r.mu.Unlock()
			}
		}()
	}
	return r
}

// unlockAcross unlocks, retrying network errors for a while: a lease left
// to expire would hold up the others. It returns ErrLost if the lease was
// lost, or the last error.
func unlockAcross(lease *dlock.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), lockBound)
	defer cancel()
	for {
		err := lease.Unlock(ctx)
		if err == nil || errors.Is(err, dlock.ErrLost) || errors.Is(err, dlock.ErrInvalid) || ctx.Err() != nil {
			select {
			case <-lease.Lost():
				if err == nil {
					err = dlock.ErrLost
				}
			default:
			}
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wait waits for the workers, failing the test if they hang.
func (r *failoverRun) wait(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(lockBound + 10*time.Second):
		t.Fatalf("contending workers still running %v after the run ended", lockBound+10*time.Second)
	}
}

// check asserts what can honestly be asserted about a contention run
// across a failover that was under way from w0 to w1:
//
//   - no Lock hung, and nothing failed outside the failover window;
//   - no two leases overlapped unless one of them was taken during the
//     window (a failover to an asynchronous replica can lose a lock just
//     taken, and the master that is being replaced can grant it again);
//     those are reported, not failed;
//   - every worker got the lock again after the failover, and the lock
//     never went maxGap without an acquisition after it;
//   - fences issued after the failover increase, and exceed every fence
//     issued before it: fence = max(last + 1, Redis time in µs), so even
//     a replica that missed `last` issues higher ones (here all nodes
//     share one clock; across machines that needs synchronised clocks).
func (r *failoverRun) check(t *testing.T, workers int, w0, w1 time.Time) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	inWindow := func(at time.Time) bool { return !at.Before(w0) && !at.After(w1.Add(settle)) }

	for _, e := range r.errs {
		if inWindow(e.at) {
			t.Logf("tolerated during the failover (at %+.3fs): %v", e.at.Sub(w0).Seconds(), e.err)
		} else {
			t.Errorf("at %+.3fs from the failover: %v", e.at.Sub(w0).Seconds(), e.err)
		}
	}

	spans := slices.Clone(r.spans)
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	lost, tolerated := 0, 0
	for i, a := range spans {
		if a.lost {
			lost++
		}
		for _, b := range spans[i+1:] {
			if !b.from.Before(a.to) {
				break
			}
			msg := fmt.Sprintf("worker %d (fence %d, %+.3fs..%+.3fs, lost %v) and worker %d (fence %d, %+.3fs..%+.3fs, lost %v) held the lock at once",
				a.worker, a.fence, a.from.Sub(w0).Seconds(), a.to.Sub(w0).Seconds(), a.lost,
				b.worker, b.fence, b.from.Sub(w0).Seconds(), b.to.Sub(w0).Seconds(), b.lost)
			if inWindow(a.from) || inWindow(b.from) {
				tolerated++
				t.Logf("tolerated, taken during the failover: %s", msg)
			} else {
				t.Errorf("%s", msg)
			}
		}
	}

	var before, after []span
	for _, s := range spans {
		switch {
		case s.from.Before(w0):
			before = append(before, s)
		case s.from.After(w1):
			after = append(after, s)
		}
	}
	got := map[int]int{}
	for _, s := range after {
		got[s.worker]++
	}
	for i := range workers {
		if got[i] == 0 {
			t.Errorf("worker %d never got the lock after the failover", i)
		}
	}
	maxBefore := uint64(0)
	for _, s := range spans {
		if !s.from.After(w1) {
			maxBefore = max(maxBefore, s.fence)
		}
	}
	for i, s := range after {
		if s.fence <= maxBefore {
			t.Errorf("fence %d after the failover is not above %d, issued before it", s.fence, maxBefore)
			break
		}
		if i > 0 && s.fence <= after[i-1].fence {
			t.Errorf("fence %d after the failover is not above %d, the one before it", s.fence, after[i-1].fence)
			break
		}
	}
	if testing.Verbose() {
		for _, s := range spans {
			if s.waited > 500*time.Millisecond || s.unlocked > 500*time.Millisecond {
				t.Logf("slow: worker %d waited %v for the lock at %+.3fs, unlock took %v",
					s.worker, s.waited.Round(time.Millisecond), s.from.Sub(w0).Seconds(), s.unlocked.Round(time.Millisecond))
			}
		}
	}
	last := w1
	for _, s := range after {
		if gap := s.from.Sub(last); gap > maxGap {
			t.Errorf("no acquisition for %v, until %+.3fs from the failover", gap.Round(time.Millisecond), s.from.Sub(w0).Seconds())
		}
		last = s.from
	}
	perSecond := make([]int, int(last.Sub(w1).Seconds())+1)
	for _, s := range after {
		perSecond[int(s.from.Sub(w1).Seconds())]++
	}
	t.Logf("acquisitions in each second after the failover: %v", perSecond)
	t.Logf("%d acquisitions before the failover, %d during (%.1fs), %d after it (per worker %v); %d leases lost, %d overlaps tolerated",
		len(before), len(spans)-len(before)-len(after), w1.Sub(w0).Seconds(), len(after), got, lost, tolerated)
}
