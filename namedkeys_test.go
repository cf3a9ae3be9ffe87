package dlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// queuedLife takes a lock of kind k through each of its scripts: a try
// that takes it, a waiter that queues (and heartbeats), one that gives up,
// a Status with the waiter in it, a release that hands the lock over, and
// the heir's release. It returns what Status showed and the keys Redis
// held while the waiter was queued.
func queuedLife(t *testing.T, ctx context.Context, mk func(meta string) func(context.Context) (*dlock.Lease, error), status func(context.Context) (dlock.Status, error), rdb *redis.Client, pattern string) (dlock.Status, []string) {
	t.Helper()
	held := mustTake(t, ctx, mk("holder"))
	// One that gives up (queue_leave), then one that stays (heartbeats).
	gctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := mk("gives up")(gctx); err == nil {
		t.Fatal("a waiter took a held lock")
	}
	var st dlock.Status
	var present []string
	handOffAfter(t, ctx, held, mk("waiter"), func() {
		for deadline := time.Now().Add(5 * time.Second); len(st.Waiters) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the waiter never showed in Status")
			}
			time.Sleep(1200 * time.Millisecond) // past a heartbeat
			var err error
			if st, err = status(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if present, err = rdb.Keys(ctx, pattern).Result(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(present)
	})
	return st, present
}

// TestScriptsSentTheirMainKeyAlone checks that on a single Redis every
// kind's scripts are sent the lock's main key alone and name the other
// keys as a Cluster's client declares them (keys.Lock.Part: the main key
// and ':' and the part): while a waiter is queued, Redis holds no key but
// those, and Status, a give-up, heartbeats, a hand-over and releases find
// them. For a Mutex and a FairMutex, whose scripts name each key where
// they read it, it checks the keys exactly.
func TestScriptsSentTheirMainKeyAlone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	d := &hook{}
	rdb.AddHook(d)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	type acquire = func(context.Context) (*dlock.Lease, error)
	type status = func(context.Context) (dlock.Status, error)
	set := c.MutexSet("named-set")
	if err := set.Add(ctx, "only"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		kind  string
		parts []string // all the lock may have; exact: it has them all
		exact bool
		mk    func(name, meta string) acquire
		st    func(name string) status
	}{
		{"mutex", []string{"alive", "fence", "queue", "wmeta"}, true,
			func(name, meta string) acquire { return c.Mutex(name, dlock.WithMetadata(meta)).Lock },
			func(name string) status { return c.Mutex(name).Status }},
		{"fair", []string{"alive", "fence", "queue", "wmeta"}, true,
			func(name, meta string) acquire { return c.FairMutex(name, dlock.WithMetadata(meta)).Lock },
			func(name string) status { return c.FairMutex(name).Status }},
		{"rw", []string{"fence", "readers", "rexp", "rmeta", "intent", "queue", "alive", "wmeta"}, false,
			func(name, meta string) acquire { return c.RWMutex(name, dlock.WithMetadata(meta)).Lock },
			func(name string) status { return c.RWMutex(name).Status }},
		{"semaphore", []string{"fence", "leases", "queue", "alive", "wmeta"}, false,
			func(name, meta string) acquire {
				return func(ctx context.Context) (*dlock.Lease, error) {
					return c.Semaphore(name, 1, dlock.WithMetadata(meta)).Acquire(ctx, 1)
				}
			},
			func(name string) status { return c.Semaphore(name, 1).Status }},
		{"set", []string{"held", "removing", "last", "queue", "alive", "wmeta"}, false,
			func(_, meta string) acquire { return c.MutexSet("named-set", dlock.WithMetadata(meta)).Acquire },
			func(string) status { return set.Status }},
	} {
		t.Run(k.kind, func(t *testing.T) {
			name := "named-" + k.kind
			d.evalKeys()
			st, present := queuedLife(t, ctx, func(meta string) acquire { return k.mk(name, meta) },
				k.st(name), rdb, "dlock:{"+name+"}:*")
			base := "dlock:{" + name + "}:" + k.kind
			want := []string{base}
			for _, p := range k.parts {
				want = append(want, base+":"+p)
			}
			slices.Sort(want)
			if k.exact && !slices.Equal(present, want) || !k.exact && slices.ContainsFunc(present, func(key string) bool { return !slices.Contains(want, key) }) {
				t.Errorf("keys while a waiter is queued: %q, want those of %q", present, want)
			}
			if len(present) < 3 {
				t.Errorf("keys while a waiter is queued: %q, want a holder's and a queue's", present)
			}
			// (A Semaphore's and a MutexSet's Status show no single holder.)
			if st.Metadata != "holder" && k.kind != "semaphore" && k.kind != "set" || len(st.Waiters) != 1 || st.Waiters[0].Metadata != "waiter" {
				t.Errorf("Status held by %q, waiters %+v; want holder and one waiter", st.Metadata, st.Waiters)
			}
			if k.kind == "rw" {
				mustUnlock(t, mustTake(t, ctx, c.RWMutex(name).RLock))
			}
			sent := d.evalKeys()
			if len(sent) < 6 {
				t.Fatalf("%d scripts sent, want a try, heartbeats, a leave, a status and two releases", len(sent))
			}
			for i, n := range sent {
				if n != 1 {
					t.Errorf("script %d of %d sent %d keys, want the main key alone", i+1, len(sent), n)
				}
			}
		})
	}

	t.Run("election", func(t *testing.T) {
		e := c.Election("named-election")
		d.evalKeys()
		lead, err := e.Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		ld, err := e.Leader(ctx)
		if err != nil || ld.Value != "a" || ld.Term != lead.Fence() {
			t.Fatalf("Leader = %+v, %v; want a in term %d", ld, err, lead.Fence())
		}
		if err := lead.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if ld, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
			t.Errorf("Leader after Resign = %+v, %v; want ErrNoLeader", ld, err)
		}
		for i, n := range d.evalKeys() {
			if n != 1 {
				t.Errorf("script %d sent %d keys, want the owner key alone", i+1, n)
			}
		}
	})
}
