package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// pairsOnOwnKeys runs n TryLock+Unlock pairs on each of goroutines keys
// of their own, all at once, with ctx, and returns the first error.
func pairsOnOwnKeys(ctx context.Context, c *dlock.Client, goroutines, n int) error {
	return together(goroutines, func(g int) error {
		m := c.Mutex(fmt.Sprint("own-", g))
		for range n {
			l, err := m.TryLock(ctx)
			if err != nil {
				return err
			}
			if l.Fence() == 0 {
				return errors.New("lease without a fence")
			}
			if err := l.Unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}

// Calls that come together, from goroutines whose ctx can end, share
// round trips: some pipelines carry several scripts, and every call gets
// its own answer.
func TestCallsTogetherShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	c, _, cnt := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const goroutines, pairs = 64, 20
	if err := pairsOnOwnKeys(ctx, c, goroutines, pairs); err != nil {
		t.Fatal(err)
	}
	cmds, trips := cnt.Load(), cnt.trips.Load()
	if cmds < 2*goroutines*pairs {
		t.Fatalf("%d commands for %d pairs", cmds, goroutines*pairs)
	}
	if trips >= cmds {
		t.Fatalf("%d round trips for %d commands: no call shared one", trips, cmds)
	}
	t.Logf("%d commands in %d round trips", cmds, trips)
}

// A script Redis lost (a restart, SCRIPT FLUSH) is loaded again for calls
// that met NOSCRIPT in a pipeline together.
func TestPipelinedCallsReloadScripts(t *testing.T) {
	srv := redistest.Start(t)
	c, rdb, cnt := newClient(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range 3 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := pairsOnOwnKeys(ctx, c, 32, 1); err != nil {
			t.Fatal(err)
		}
	}
	if cmds, trips := cnt.Load(), cnt.trips.Load(); trips >= cmds {
		t.Fatalf("%d round trips for %d commands: no pipeline carried more than one call", trips, cmds)
	}
}

// Calls that wait for a pipeline behind others sent to a paused Redis
// return by their ctx deadline, and once Redis answers again the calls
// after them go through: nothing is left waiting for a pipeline.
func TestPipelinedCallsReturnByDeadlineWhilePaused(t *testing.T) {
	srv := redistest.Start(t)
	c, _, _ := newClient(t, srv)
	srv.Pause(t)
	const goroutines, wait = 32, 200 * time.Millisecond
	err := together(goroutines, func(g int) error {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		start := time.Now()
		_, err := c.Mutex(fmt.Sprint("paused-", g)).TryLock(ctx)
		if took := time.Since(start); err == nil || took > wait+150*time.Millisecond {
			return fmt.Errorf("TryLock on a paused Redis: %v after %v, ctx deadline %v", err, took, wait)
		}
		return nil
	})
	srv.Resume(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := pairsOnOwnKeys(ctx, c, goroutines, 5); err != nil {
		t.Fatal(err)
	}
}
