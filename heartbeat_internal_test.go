package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/redistest"
)

// A heartbeat that reaches Redis after its waiter took the lock (it was
// in a batch on its way) tells it to try and leaves the lease alone: a
// lease refreshed to a longer TTL keeps it, since the holder counts on it.
func TestHeartbeatLeavesTheLeaseAlone(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := New(srv.Client(t))
	t.Cleanup(func() { c.Close() })
	opt := WithTTL(5 * time.Second)
	set := c.MutexSet("beat-set", opt)
	if err := set.Add(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	rw := c.RWMutex("beat-rw", opt)
	for _, k := range []struct {
		name   string
		take   func(context.Context) (*Lease, error)
		waiter *acquisition
		status func(context.Context) (Status, error)
	}{
		{"Mutex", c.Mutex("beat-mutex", opt).TryLock, c.queued(kindMutex, "beat-mutex", []LockOption{opt}).acquisition(true, ""),
			c.Mutex("beat-mutex").Status},
		{"FairMutex", c.FairMutex("beat-fair", opt).TryLock, c.queued(kindFair, "beat-fair", []LockOption{opt}).acquisition(true, ""),
			c.FairMutex("beat-fair").Status},
		{"RWMutex", rw.TryLock, rw.writer(true), rw.Status},
		{"MutexSet", set.TryAcquire, set.acquisition("", true), set.Status},
	} {
		t.Run(k.name, func(t *testing.T) {
			l, err := k.take(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock(ctx)
			if err := l.Refresh(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			r, err := k.waiter.parse(k.waiter.beat(l.token).run(ctx, c.rdb).Slice())
			if err != nil || r.ok || r.wait != 0 {
				t.Fatalf("heartbeat of the holder's token: %+v, %v; want a refusal to try at once", r, err)
			}
			st, err := k.status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.TTL < 50*time.Second {
				t.Errorf("TTL %v after the heartbeat; want the minute Refresh set", st.TTL)
			}
		})
	}
}

// When a lock is free (its holder's lease ran out) and the first waiter
// is dead, one batch of heartbeats prunes it: the next waiter is told to
// try, the one after it to wait for that one, not to try too.
func TestHeartbeatPrunesTheDeadAheadOfAFreeLock(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	c, holders := New(rdb), New(srv.Client(t))
	t.Cleanup(func() { c.Close(); holders.Close() })
	if _, err := holders.Mutex("beat-dead", WithTTL(time.Minute)).TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	q := c.queued(kindMutex, "beat-dead", nil)
	owner, queue, alive := q.keys.Key(), q.keys.Part("queue"), q.keys.Part("alive")
	var beats []scriptCall
	for _, tok := range []string{"dead", "next", "last"} {
		a := q.acquisition(true, "")
		if r, err := a.try(ctx, tok); err != nil || r.ok {
			t.Fatalf("try of %s = %+v, %v; want queued", tok, r, err)
		}
		beats = append(beats, a.beat(tok))
	}
	if err := rdb.ZAdd(ctx, alive, redis.Z{Score: 1, Member: "dead"}).Err(); err != nil { // its deadline long past
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, owner).Err(); err != nil { // the holder's lease ran out
		t.Fatal(err)
	}
	cmds := sendAll(ctx, rdb, beats[1:])
	next, err := parseAttempt(cmds[0].Slice())
	if err != nil || next.wait != 0 {
		t.Errorf("heartbeat of the first live waiter = %+v, %v; want to try now", next, err)
	}
	last, err := parseAttempt(cmds[1].Slice())
	if err != nil || last.wait <= 0 || last.holder != 0 {
		t.Errorf("heartbeat of the waiter behind it = %+v, %v; want to wait for it", last, err)
	}
	if rdb.ZScore(ctx, queue, "dead").Err() != redis.Nil {
		t.Error("the dead waiter is still queued")
	}
}
