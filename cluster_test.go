package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// TestCluster runs the Mutex on a 3+3 Redis Cluster: locks whose names
// hash to every master, exclusion under contention, and a waiter woken by
// a release through sharded pub/sub rather than by the holder's expiry.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	for kind, mk := range lockers {
		t.Run("exclusion/"+kind, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "held")
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var mu sync.Mutex
			var fences []uint64
			errs := make([]error, 8)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = contend(cctx, mk(c, "cluster-shared"), marker, time.Millisecond, func(f uint64) {
						mu.Lock()
						fences = append(fences, f)
						mu.Unlock()
					})
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if len(fences) < 8 {
				t.Fatalf("only %d acquisitions", len(fences))
			}
			checkIncreasing(t, fences)
		})
	}

	t.Run("rw readers and writers", func(t *testing.T) {
		m := &rwMarkers{dir: t.TempDir()}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var mu sync.Mutex
		var events []rwEvent
		err := rwMix(cctx, c, "cluster-rw", m, 4, 1, func(e rwEvent) { mu.Lock(); events = append(events, e); mu.Unlock() })
		if err != nil {
			t.Fatal(err)
		}
		reads, writes := checkRWFences(t, events)
		if reads < 4 || writes < 1 || m.most.Load() < 2 {
			t.Fatalf("%d reads, %d writes, up to %d readers at once", reads, writes, m.most.Load())
		}

		// Both wake channels, long before the 30s leases would end: a
		// writer's release wakes a reader, a reader's release a writer
		// (PreferReaders: the writer has no heartbeat to wake it).
		rw := c.RWMutex("cluster-rw-wake", dlock.WithTTL(30*time.Second), dlock.WithRWMode(dlock.PreferReaders))
		type lockFunc func(context.Context) (*dlock.Lease, error)
		for _, turn := range [][2]lockFunc{{rw.Lock, rw.RLock}, {rw.RLock, rw.Lock}} {
			h, err := turn[0](ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := turn[1](ctx)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			time.Sleep(100 * time.Millisecond)
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("waiter not woken by the release")
			}
		}
	})

	t.Run("wake on every shard", func(t *testing.T) {
		// 12 names spread over the 3 masters; each waiter must be woken by
		// its release long before the holder's 30s lease would end.
		for i := range 12 {
			name := fmt.Sprintf("cluster-wake-%d", i)
			h, err := c.Mutex(name, dlock.WithTTL(30*time.Second)).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := c.Mutex(name).Lock(ctx)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			time.Sleep(50 * time.Millisecond)
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("waiter on %s not woken by the release", name)
			}
		}
	})
}
