package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
)

// Many waiters of every queued kind on one client, each blocked on a lock
// of its own that another client holds and renews: their heartbeats go in
// one round trip per period, however many wait; the holders' renewals
// wake none of them; their places outlive the liveness timeout; and each
// release hands the lock over in one message, with no try.
func TestManyWaitersBeatTogether(t *testing.T) {
	srv, ctx := serve(t)
	holders, _, _ := newClient(t, srv)
	cnt := &hook{mark: "waiting"}
	c, _ := hooked(t, srv, cnt)
	const perKind, ttl = 100, 3 * time.Second
	type waiter struct {
		held *dlock.Lease
		l    queuedLock
		got  <-chan error
	}
	var ws []waiter
	for _, k := range queuedKinds {
		for i := range perKind {
			name := fmt.Sprintf("beat-%s/%d", k.name, i)
			held := mustTake(t, ctx, k.get(holders, name, dlock.WithTTL(ttl)).Lock)
			l := k.get(c, name, dlock.WithTTL(ttl), dlock.WithMetadata(cnt.mark))
			ws = append(ws, waiter{held, l, takeAndRelease(ctx, l.Lock)})
		}
	}
	for _, w := range ws {
		waitQueued(t, w.l, 1)
	}

	// Past the liveness timeout (3s), and past the holders' expiry had
	// they not renewed.
	const period = 4 * time.Second
	trips, tries := cnt.trips.Load(), cnt.marked.Load()
	time.Sleep(period)
	trips, tries = cnt.trips.Load()-trips, cnt.marked.Load()-tries
	t.Logf("%d waiters for %v: %d round trips, %d tries", len(ws), period, trips, tries)
	if tries > 0 {
		t.Errorf("%d tries while the holders renewed; want none", tries)
	}
	if max := int64(period/time.Second) + 1; trips > max {
		t.Errorf("%d round trips in %v for %d waiters; want at most %d (a batch of heartbeats a second)", trips, period, len(ws), max)
	}
	for _, w := range ws {
		if st := statusOf(t, w.l); len(st.Waiters) != 1 {
			t.Fatalf("%+v: the waiter's place lapsed", st)
		}
	}

	// A waiter handed the lock takes it without a try (but in a race, see
	// below): its heartbeats keep the hand-off usable. It then sends its
	// lease's first renewal (unless its unlock comes first) and its
	// unlock.
	trips, tries = cnt.trips.Load(), cnt.marked.Load()
	start := time.Now()
	for _, w := range ws {
		mustUnlock(t, w.held)
	}
	for _, w := range ws {
		within(t, w.got, 10*time.Second, "a waiter did not get the lock released")
	}
	trips, tries = cnt.trips.Load()-trips, cnt.marked.Load()-tries
	t.Logf("%d round trips and %d tries for %d hand-offs", trips, tries, len(ws))
	// A heartbeat sent after a grant, whose reply comes before the grant's
	// message, tells its waiter to try (it finds the lock its own): on a
	// busy machine a few of the 600 may; a hand-off that took a try would
	// make hundreds.
	if max := int64(len(ws) / 100); tries > max {
		t.Errorf("%d tries for %d hand-offs; want at most %d (a heartbeat's reply ahead of its grant's message)", tries, len(ws), max)
	}
	if max := int64(2*len(ws)) + int64(time.Since(start)/time.Second) + 1; trips > max {
		t.Errorf("%d round trips for %d hand-offs; want at most %d (a renewal and an unlock each)", trips, len(ws), max)
	}
}

// A waiter whose place is taken away (here an operator clears the queue)
// learns it from its next heartbeat and joins again, and gets the lock
// when it is released.
func TestWaiterDroppedFromQueueJoinsAgain(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t)
			c, rdb, _ := newClient(t, srv)
			l := k.get(c, "dropped", dlock.WithTTL(30*time.Second))
			held := mustTake(t, ctx, l.Lock)
			// The waiter, on a client of its own, tries twice: once to
			// queue, once more when subscribed. Then only heartbeats.
			wh := &hook{mark: "dropped-waiter"}
			wc, _ := hooked(t, srv, wh)
			got := takeAndRelease(ctx, k.get(wc, "dropped", dlock.WithMetadata(wh.mark)).Lock)
			err := eventually(ctx, 5*time.Second, func() error {
				if n := wh.marked.Load(); n < 2 {
					return fmt.Errorf("%d tries, want 2", n)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			waitQueued(t, l, 1)
			waiters := waiterKeys(t, rdb, "dropped")
			if err := rdb.Del(ctx, waiters...).Err(); err != nil {
				t.Fatal(err)
			}
			if st := statusOf(t, l); len(st.Waiters) != 0 {
				t.Fatalf("%+v: still queued after the queue was cleared", st)
			}
			waitQueued(t, l, 1) // a heartbeat comes within a second or two
			mustUnlock(t, held)
			within(t, got, 5*time.Second, "the waiter did not get the lock released")
		})
	}
}

// The keys of a queue of waiters expire with them: whenever a waiter
// joins or beats, each of the three keys outlasts the liveness deadline of
// every waiter in the line, and by no more than twice the liveness
// timeout; also when the queue is made anew after it emptied. (A join or
// a heartbeat extends them only when they would end too soon.)
func TestQueueKeysOutlastTheirWaiters(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t) // in parallel
			c, rdb, _ := newClient(t, srv)
			l := k.get(c, "outlast", dlock.WithTTL(30*time.Second))
			held := mustTake(t, ctx, l.Lock)
			wc, _, _ := newClient(t, srv)
			queued := func(n int) (cancel func(), got <-chan error) {
				wctx, cancel := context.WithCancel(ctx)
				got = takeAndRelease(wctx, k.get(wc, "outlast").Lock)
				waitQueued(t, l, n)
				return cancel, got
			}
			cancelA, gotA := queued(1)
			ks := waiterKeys(t, rdb, "outlast")
			// One script reads the keys' expiry times and the last
			// liveness deadline at one instant (all server ms).
			const read = `local out = {}
for i = 1, 3 do out[i] = redis.call('PEXPIRETIME', KEYS[i]) end
out[4] = tonumber(redis.call('ZRANGE', KEYS[2], '-1', '-1', 'WITHSCORES')[2] or '-1')
return out`
			const live = 3000 // ms: the waiters' liveness timeout
			check := func(when string) {
				t.Helper()
				v, err := rdb.Eval(ctx, read, ks).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				last := v[3]
				for i, at := range v[:3] {
					if at < last || at > last+2*live {
						t.Fatalf("%s: %s expires at %d; want within [%d, %d], the last waiter's deadline and twice the liveness timeout after it",
							when, ks[i], at, last, last+2*live)
					}
				}
			}
			check("first waiter queued")
			cancelB, gotB := queued(2)
			// Beats of both, past the first keys' expiry had nothing
			// extended them since.
			for i := range 45 {
				check(fmt.Sprintf("two waiters, %d ms on", 100*i))
				time.Sleep(100 * time.Millisecond)
			}
			cancelA()
			cancelB()
			<-gotA
			<-gotB
			waitQueued(t, l, 0)
			if n, err := rdb.Exists(ctx, ks...).Result(); err != nil || n != 0 {
				t.Fatalf("%d waiter keys left with no waiter (%v); want none", n, err)
			}
			cancelC, gotC := queued(1)
			check("a waiter queued anew")
			// An operator deletes the queue alone; the next join makes it
			// anew, with the others' expiry.
			if err := rdb.Del(ctx, ks[0]).Err(); err != nil {
				t.Fatal(err)
			}
			cancelD, gotD := queued(1)
			check("the queue made anew by a join, its other keys alive")
			cancelC()
			cancelD()
			<-gotC
			<-gotD
			mustUnlock(t, held)
		})
	}
}

// waiterKeys returns the three keys of the queue of waiters of the lock
// name, which has waiters: its queue, their liveness and their metadata.
func waiterKeys(t *testing.T, rdb *redis.Client, name string) []string {
	t.Helper()
	names, err := rdb.Keys(t.Context(), "*{"+name+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, suffix := range []string{":queue", ":alive", ":wmeta"} {
		for _, n := range names {
			if strings.HasSuffix(n, suffix) {
				ks = append(ks, n)
			}
		}
	}
	if len(ks) != 3 {
		t.Fatalf("waiter keys %q among %q; want 3", ks, names)
	}
	return ks
}
