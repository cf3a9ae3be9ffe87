package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// TestSentinelFailover runs the Mutex through redis.NewFailoverClient while
// the Sentinels fail the master over, once on request (SENTINEL FAILOVER,
// the old master lives on) and once because the master was killed. During
// each failover:
//
//   - a holder keeps a lease with auto-refresh: afterwards it either still
//     holds it (Held, and Refresh succeeds) or Lost() has closed, within a
//     bounded time; while it holds it, no waiter has the lock;
//   - waiters blocked in Lock get the lock after the holder lets go (or its
//     lease ran out), within a bounded time;
//   - workers contend for another lock: see failoverRun.check.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		failover func(t *testing.T, s *redistest.Sentinel)
		// rejoin waits until the old master is a replica again.
		rejoin bool
	}{
		// The old master stays a master, with the hub's subscription on
		// it, until the Sentinels make it a replica of the new one
		// (about 10s): until then releases announced on the new master
		// reach no waiter, who try again on their heartbeat (every
		// second). The run goes on past that, to see the pace recover.
		{"asked", func(t *testing.T, s *redistest.Sentinel) { s.Failover(t) }, true},
		{"master killed", func(t *testing.T, s *redistest.Sentinel) {
			s.Master(t).Kill(t)
			s.WaitMaster(t)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartSentinel(t)
			newLocks := func() *dlock.Client {
				c := dlock.New(s.FailoverClient(t, func(o *redis.FailoverOptions) {
					// Fail fast on a dead master, so that renewals are
					// retried within the lease rather than stuck in a dial.
					o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
				}))
				t.Cleanup(func() { c.Close() })
				return c
			}
			holderLocks, waiterLocks := newLocks(), newLocks()
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()

			const ttl = 3 * time.Second
			holder := mustTake(t, ctx, holderLocks.Mutex("held", dlock.WithTTL(ttl)).Lock)
			type got struct {
				at  time.Time
				err error
			}
			const waiters = 3
			results := make(chan got, waiters)
			for range waiters {
				go func() {
					wctx, cancel := context.WithTimeout(ctx, 2*lockBound)
					defer cancel()
					l, err := waiterLocks.Mutex("held", dlock.WithTTL(ttl)).Lock(wctx)
					at := time.Now()
					if err == nil {
						time.Sleep(10 * time.Millisecond)
						err = unlockAcross(l)
						if errors.Is(err, dlock.ErrLost) {
							err = nil // lost in the failover, but it was had
						}
					}
					results <- got{at, err}
				}()
			}

			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			workerLocks := []*dlock.Client{newLocks(), newLocks()}
			const workers = 4
			run := contendAcross(runCtx, workers, func(i int) dlock.Locker {
				return workerLocks[i%2].Mutex("contended", dlock.WithTTL(2*time.Second))
			}, 5*time.Millisecond)

			time.Sleep(time.Second)
			w0 := time.Now()
			tc.failover(t, s)
			w1 := time.Now()
			t.Logf("new master confirmed %v after the failover began", w1.Sub(w0))

			// The holder: still holding, or told it lost the lease.
			outcome, deadline := "", time.Now().Add(lockBound)
			for outcome == "" {
				select {
				case <-holder.Lost():
					outcome = "lost"
					continue
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("holder neither holds its lease nor was told it lost it %v after the failover", lockBound)
				}
				hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				held, err := holder.Held(hctx)
				if err == nil && held {
					switch err := holder.Refresh(hctx, ttl); {
					case err == nil:
						outcome = "held"
					case errors.Is(err, dlock.ErrLost):
						outcome = "lost"
					}
				}
				cancel()
				if outcome == "" {
					time.Sleep(100 * time.Millisecond)
				}
			}
			t.Logf("holder's lease %s, known %v after the failover began", outcome, time.Since(w0))
			var early []got // waiters done before the holder let go
		drain:
			for {
				select {
				case r := <-results:
					early = append(early, r)
				default:
					break drain
				}
			}
			released := time.Now()
			err := unlockAcross(holder)
			if outcome == "held" && err != nil {
				t.Fatalf("unlock of a held lease: %v", err)
			}
			for _, r := range early {
				switch {
				case r.err != nil:
					t.Errorf("waiter: %v", r.err)
				case outcome == "held":
					t.Errorf("a waiter got the lock at %+.3fs while the holder's lease was valid", r.at.Sub(w0).Seconds())
				default:
					t.Logf("a waiter got the lock at %+.3fs, after the holder's lease was lost", r.at.Sub(w0).Seconds())
				}
			}
			for range waiters - len(early) {
				select {
				case r := <-results:
					if r.err != nil {
						t.Errorf("waiter: %v", r.err)
					} else {
						t.Logf("a waiter got the lock %v after the holder let go", r.at.Sub(released).Round(time.Millisecond))
					}
				case <-time.After(2 * lockBound):
					t.Fatalf("waiters blocked during the failover still waiting %v after the holder let go", 2*lockBound)
				}
			}

			end := w1.Add(afterFailover)
			if tc.rejoin {
				s.WaitReplica(t)
				t.Logf("old master a replica again %v after the failover began", time.Since(w0))
				end = time.Now().Add(afterFailover)
			}
			if d := time.Until(end); d > 0 {
				time.Sleep(d)
			}
			stop()
			run.wait(t)
			run.check(t, workers, w0, w1)
		})
	}
}
