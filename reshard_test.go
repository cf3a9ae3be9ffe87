package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// resharded starts a Cluster whose slots the test moves, and a client of
// it; ctx ends with the test, or after a minute.
func resharded(t *testing.T) (*redistest.Cluster, *dlock.Client, context.Context) {
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	c := dlock.New(cl.Client(t))
	t.Cleanup(func() { c.Close() })
	return cl, c, ctx
}

// TestReshardMigratingSlotKeepsLeases: a slot is marked migrating (as
// redis-cli --cluster reshard does first) and stays so for longer than
// the leases' TTL while none of its keys has moved yet (a slot with many
// keys, a reshard that stalled). Every key of each lease is still on the
// old master, which must go on renewing it, and answer Held and an
// election's Proclaim: a script that named keys a held lease does not
// keep (a Semaphore's waiter queue, a read share's writer keys, an
// election's queue) was refused with TRYAGAIN, and the leases ran out.
func TestReshardMigratingSlotKeepsLeases(t *testing.T) {
	t.Parallel()
	cl, c, ctx := resharded(t)
	const name = "moving" // every kind's keys of one name share a slot
	ttl := dlock.WithTTL(2 * time.Second)
	leases := map[string]*dlock.Lease{}
	take := func(kind string, f func(context.Context) (*dlock.Lease, error)) {
		l, err := f(ctx)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		leases[kind] = l
	}
	take("mutex", c.Mutex(name, ttl).Lock)
	take("semaphore", func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore(name, 2, ttl).Acquire(ctx, 1) })
	take("read share", c.RWMutex(name, ttl).RLock)
	leader, err := c.Election(name, ttl).Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	leases["leadership"] = leader.Lease
	mv := cl.MoveSlotOf(t, "dlock:{"+name+"}:mutex")
	mv.Begin() // no key moved
	time.Sleep(4 * time.Second)
	for kind, l := range leases {
		if isClosed(l.Lost()) {
			t.Errorf("%s: Lost() closed while its slot was migrating, none of its keys moved", kind)
		}
		if held, err := l.Held(ctx); !held || err != nil {
			t.Errorf("%s: Held while its slot migrates: %v, %v", kind, held, err)
		}
	}
	if err := leader.Proclaim(ctx, "v2"); err != nil {
		t.Errorf("Proclaim while the slot migrates: %v", err)
	}
	mv.Migrate()
	mv.Finish()
	for kind, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock after the move: %v", kind, err)
		}
	}
}

// TestReshardUnlockRetriesTryAgain: Unlock while the lock's slot migrates
// for a second, after which the move completes. Redis refuses the release
// (TRYAGAIN: its keys are split between the two masters, or some do not
// exist) without running it; Unlock sends it again, as it has time to,
// instead of failing after its four tries (70ms) and leaving the lock to
// a release in the background.
func TestReshardUnlockRetriesTryAgain(t *testing.T) {
	t.Parallel()
	cl, c, ctx := resharded(t)
	const name = "moving"
	takes := map[string]func(context.Context) (*dlock.Lease, error){
		"mutex":     c.Mutex(name).Lock,
		"fair":      c.FairMutex(name).Lock,
		"rw writer": c.RWMutex(name).Lock,
		"semaphore": func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore(name, 1).Acquire(ctx, 1) },
	}
	leases := map[string]*dlock.Lease{}
	for kind, take := range takes {
		l, err := take(ctx)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		leases[kind] = l
	}
	mv := cl.MoveSlotOf(t, "dlock:{"+name+"}:mutex")
	mv.Begin()
	unlocked := make(chan struct{})
	go func() {
		defer close(unlocked)
		for kind, l := range leases {
			uctx, ucancel := context.WithTimeout(ctx, 10*time.Second)
			start := time.Now()
			err := l.Unlock(uctx)
			ucancel()
			if err != nil {
				t.Errorf("%s: Unlock after %v: %v", kind, time.Since(start).Round(time.Millisecond), err)
			}
		}
	}()
	time.Sleep(time.Second)
	mv.Migrate()
	mv.Finish()
	<-unlocked
}
