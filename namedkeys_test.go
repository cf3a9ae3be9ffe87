package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// declared records the keys count of every script sent (EVAL, EVALSHA),
// alone or in a pipeline.
type declared struct {
	mu     sync.Mutex
	counts []int
}

func (d *declared) record(cmd redis.Cmder) {
	if !isEval(cmd) {
		return
	}
	n, err := strconv.Atoi(fmt.Sprint(cmd.Args()[2]))
	if err != nil {
		n = -1
	}
	d.mu.Lock()
	d.counts = append(d.counts, n)
	d.mu.Unlock()
}

func (d *declared) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d *declared) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		d.record(cmd)
		return next(ctx, cmd)
	}
}

func (d *declared) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			d.record(cmd)
		}
		return next(ctx, cmds)
	}
}

// take returns the keys counts recorded since the last take.
func (d *declared) take() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.counts
	d.counts = nil
	return out
}

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
	got := takeAndRelease(ctx, mk("waiter"))
	var st dlock.Status
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
	present, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(present)
	mustUnlock(t, held)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not handed the lock")
	}
	return st, present
}

// TestQueuedScriptsSentTheirOwnerKeyAlone checks that on a single Redis a
// Mutex's, FairMutex's and Election's scripts are sent their owner key
// alone and name the other keys as a Cluster's client declares them: the
// keys Redis holds while a waiter is queued are the owner key and its
// parts ':fence', ':queue', ':alive' and ':wmeta', and Status, give-up,
// heartbeat and hand-over find them.
func TestQueuedScriptsSentTheirOwnerKeyAlone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	d := &declared{}
	rdb.AddHook(d)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	for _, k := range []struct {
		kind string
		mk   func(name, meta string) func(context.Context) (*dlock.Lease, error)
		st   func(name string) func(context.Context) (dlock.Status, error)
	}{
		{"mutex", func(name, meta string) func(context.Context) (*dlock.Lease, error) {
			return c.Mutex(name, dlock.WithMetadata(meta)).Lock
		}, func(name string) func(context.Context) (dlock.Status, error) { return c.Mutex(name).Status }},
		{"fair", func(name, meta string) func(context.Context) (*dlock.Lease, error) {
			return c.FairMutex(name, dlock.WithMetadata(meta)).Lock
		}, func(name string) func(context.Context) (dlock.Status, error) { return c.FairMutex(name).Status }},
	} {
		t.Run(k.kind, func(t *testing.T) {
			name := "named-" + k.kind
			d.take()
			st, present := queuedLife(t, ctx, func(meta string) func(context.Context) (*dlock.Lease, error) { return k.mk(name, meta) },
				k.st(name), rdb, "dlock:{"+name+"}:*")
			base := "dlock:{" + name + "}:" + k.kind
			want := []string{base, base + ":alive", base + ":fence", base + ":queue", base + ":wmeta"}
			if !slices.Equal(present, want) {
				t.Errorf("keys while a waiter is queued: %q, want %q", present, want)
			}
			if st.Metadata != "holder" || len(st.Waiters) != 1 || st.Waiters[0].Metadata != "waiter" {
				t.Errorf("Status held by %q, waiters %+v; want holder and one waiter", st.Metadata, st.Waiters)
			}
			sent := d.take()
			if len(sent) < 6 {
				t.Fatalf("%d scripts sent, want a try, heartbeats, a leave, a status and two releases", len(sent))
			}
			for i, n := range sent {
				if n != 1 {
					t.Errorf("script %d of %d sent %d keys, want the owner key alone", i+1, len(sent), n)
				}
			}
		})
	}

	t.Run("election", func(t *testing.T) {
		e := c.Election("named-election")
		d.take()
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
		for i, n := range d.take() {
			if n != 1 {
				t.Errorf("script %d sent %d keys, want the owner key alone", i+1, n)
			}
		}
	})
}
