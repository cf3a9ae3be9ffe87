package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
	"github.com/go-dlock/dlock/internal/token"
)

// queuedLock is a Mutex, a FairMutex, the write side of an RWMutex, a
// MutexSet of one member (see oneMember), a Semaphore of one permit
// (see onePermit) or an Election (see campaigner): the locks whose release hands the lock straight to the
// first waiter.
type queuedLock interface {
	Lock(ctx context.Context) (*dlock.Lease, error)
	Status(ctx context.Context) (dlock.Status, error)
}

var queuedKinds = []struct {
	name string
	get  func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock
}{
	{"Mutex", func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock { return c.Mutex(name, opts...) }},
	{"FairMutex", func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock {
		return c.FairMutex(name, opts...)
	}},
	{"RWMutex", func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock {
		return c.RWMutex(name, opts...)
	}},
	{"MutexSet", func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock {
		s := c.MutexSet(name, opts...)
		return oneMember{s, s.Add(context.Background(), "only")}
	}},
	{"Semaphore", func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock {
		return onePermit{c.Semaphore(name, 1, opts...)}
	}},
	{"Election", func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock {
		return campaigner{c.Election(name, opts...)}
	}},
}

// onePermit is a Semaphore of size 1 as a queuedLock and a Locker: Lock
// acquires its permit, and Status describes the permit's holder as a
// lock's.
type onePermit struct{ *dlock.Semaphore }

func (s onePermit) TryLock(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 1) }
func (s onePermit) Lock(ctx context.Context) (*dlock.Lease, error)    { return s.Acquire(ctx, 1) }
func (s onePermit) Do(ctx context.Context, fn func(context.Context) error) error {
	return s.Semaphore.Do(ctx, 1, fn)
}

func (s onePermit) Status(ctx context.Context) (dlock.Status, error) {
	st, err := s.Semaphore.Status(ctx)
	for _, h := range st.Holders {
		st.Metadata, st.TTL, st.Since, st.Fence = h.Metadata, h.TTL, h.Since, h.Fence
	}
	return st, err
}

// campaigner is an Election as a queuedLock and a Locker: Lock
// campaigns, with the value "v", and the leadership is the lease.
type campaigner struct{ *dlock.Election }

func (e campaigner) TryLock(ctx context.Context) (*dlock.Lease, error) {
	return leaseOf(e.TryCampaign(ctx, "v"))
}

func (e campaigner) Lock(ctx context.Context) (*dlock.Lease, error) {
	return leaseOf(e.Campaign(ctx, "v"))
}

func (e campaigner) Do(ctx context.Context, fn func(context.Context) error) error {
	return e.Election.Do(ctx, "v", fn)
}

// leaseOf gives the lease of a campaign's leadership, or its error.
func leaseOf(l *dlock.Leadership, err error) (*dlock.Lease, error) {
	if err != nil {
		return nil, err
	}
	return l.Lease, nil
}

// oneMember is a MutexSet of one member as a queuedLock: Lock acquires any
// member, and Status describes the member's holder as a lock's.
type oneMember struct {
	*dlock.MutexSet
	err error // from adding the member
}

func (s oneMember) Lock(ctx context.Context) (*dlock.Lease, error) {
	if s.err != nil {
		return nil, s.err
	}
	return s.Acquire(ctx)
}

func (s oneMember) Status(ctx context.Context) (dlock.Status, error) {
	st, err := s.MutexSet.Status(ctx)
	if err != nil {
		return st, err
	}
	ms, err := s.Members(ctx)
	for _, m := range ms {
		if m.Held {
			st.Metadata, st.TTL, st.Since, st.Fence = m.Metadata, m.TTL, m.Since, m.Fence
		}
	}
	return st, err
}

// triesBy counts the acquire scripts a client sends for a lock with
// metadata meta: the only requests that carry it.
type triesBy struct {
	meta string
	n    atomic.Int64
}

func (h *triesBy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *triesBy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if slices.Contains(cmd.Args(), any(h.meta)) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *triesBy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestHandOffInOneMessage: a release hands the lock to the waiter with the
// wake-up message, so the waiter holds it without a try of its own; its
// first renewal then sets its TTL.
func TestHandOffInOneMessage(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t)
			holderC, _, _ := newClient(t, srv)
			tries := &triesBy{meta: "waiter-" + k.name}
			rdb := srv.Client(t)
			rdb.AddHook(tries)
			waiterC := dlock.New(rdb)
			t.Cleanup(func() { waiterC.Close() })

			const ttl = 30 * time.Second
			lock := k.get(holderC, "one-message", dlock.WithTTL(ttl))
			h := mustTake(t, ctx, lock.Lock)
			got := make(chan *dlock.Lease, 1)
			go func() {
				l, err := k.get(waiterC, "one-message", dlock.WithTTL(ttl), dlock.WithMetadata(tries.meta)).Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			waitQueued(t, lock, 1)
			time.Sleep(5 * time.Millisecond) // a Mutex's first waiter must have waited over 1ms
			before := tries.n.Load()
			mustUnlock(t, h)
			l := <-got
			if l == nil {
				return
			}
			defer mustUnlock(t, l)
			if n := tries.n.Load() - before; n != 0 {
				t.Errorf("the waiter sent %d tries after the release; want 0: the release hands the lock over", n)
			}
			if l.Fence() <= h.Fence() {
				t.Errorf("fence %d after %d", l.Fence(), h.Fence())
			}
			// The hand-off holds the lock for the waiter's liveness timeout
			// (3s) until the waiter's first renewal sets its own TTL.
			err := eventually(ctx, 5*time.Second, func() error {
				st := statusOf(t, lock)
				if st.Metadata != tries.meta || st.TTL <= 3*time.Second {
					return fmt.Errorf("holder %q, TTL %v; want the waiter's, and the TTL %v its renewal sets", st.Metadata, st.TTL, ttl)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHandOffMessageOnItsChannel: a release hands the lock over with one
// message on the waiter's client's channel beside the lock's release
// channel, whatever bytes the prefix and the name hold (the release reads
// the channel out of an argument that also carries the publish command):
// checked with a pattern subscription that sees every message, for the
// kinds whose releases read it so.
func TestHandOffMessageOnItsChannel(t *testing.T) {
	const prefix, name = "a prefix", "sp ace\nnul\x00{tag} end"
	for _, k := range queuedKinds {
		kind := queuedKeyKind[k.name]
		if kind != keys.KindMutex && kind != keys.KindFair && kind != keys.KindElect {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t)
			holderC, rdb, _ := newClient(t, srv, dlock.WithPrefix(prefix))
			waiterC, _, _ := newClient(t, srv, dlock.WithPrefix(prefix))
			lock := k.get(holderC, name)
			h := mustTake(t, ctx, lock.Lock)
			got := takeAndRelease(ctx, k.get(waiterC, name).Lock)
			waitQueued(t, lock, 1)
			time.Sleep(5 * time.Millisecond) // a Mutex's first waiter must have waited over 1ms

			all := rdb.PSubscribe(ctx, "*")
			defer all.Close()
			if _, err := all.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			mustUnlock(t, h)
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			msg, err := all.ReceiveTimeout(ctx, 5*time.Second)
			if err != nil {
				t.Fatalf("no message after the release: %v", err)
			}
			m, ok := msg.(*redis.Message)
			if !ok {
				t.Fatalf("first message after the release: %#v; want a message", msg)
			}
			if want := waitersChannel(keys.For(prefix, kind, name).Channel(), m.Payload); m.Channel != want {
				t.Errorf("first message after the release: %#v; want one on %q", msg, want)
			}
		})
	}
}

// TestHandOffWakesOnlyItsWaitersProcess: waiters hear their hand-offs on
// their own client's channel beside the lock's, so that a release wakes
// the one process whose waiter it hands the lock to, not every process
// waiting for the lock. Two clients with a waiter each on one lock: two
// channels with one subscriber each, none on the lock's own channel, and
// each release's one message goes to the channel of the waiter it names.
func TestHandOffWakesOnlyItsWaitersProcess(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t)
			name := "one-process-" + marker()
			lk, base := handOffChannel(k.name, name)
			holder, rdb, _ := newClient(t, srv)
			h := mustTake(t, ctx, k.get(holder, name).Lock)
			var queued []string
			leases := make(chan *dlock.Lease, 2)
			for i := range 2 {
				c, _, _ := newClient(t, srv)
				go func() {
					l, err := k.get(c, name).Lock(ctx)
					if err != nil {
						t.Error(err)
					}
					leases <- l
				}()
				queued = append(queued, firstWaiters(t, rdb, lk.Part("queue"), i+1)[i])
			}
			time.Sleep(5 * time.Millisecond) // a Mutex's first waiter must have waited over 1ms

			heard := map[string]int64{}
			for _, tok := range queued {
				heard[waitersChannel(base, tok)] = 1
			}
			heard[base] = 0
			for ch, want := range heard {
				n := rdb.PubSubNumSub(ctx, ch).Val()[ch]
				if n != want {
					t.Errorf("%q has %d subscribers, want %d", ch, n, want)
				}
			}

			all := rdb.PSubscribe(ctx, "*")
			defer all.Close()
			if _, err := all.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			for i, tok := range queued {
				mustUnlock(t, h)
				// Past an Election's announcements, for its observers.
				m := nextMessage(t, all, func(m *redis.Message) bool { return m.Channel == base && m.Payload == "leader" })
				if want := waitersChannel(base, tok); m.Channel != want || !strings.HasPrefix(m.Payload, tok) {
					t.Fatalf("message after release %d: %#v; want one for %s on %q", i+1, m, tok, want)
				}
				if h = <-leases; h == nil {
					t.FailNow()
				}
			}
			mustUnlock(t, h)
		})
	}
}

// handOffChannel returns the keys of the lock name of the queued kind
// kindName (see queuedKinds), and the release channel beside which its
// waiters' clients hear their hand-offs (see keys.ClientChannel): an
// RWMutex's writers'.
func handOffChannel(kindName, name string) (keys.Lock, string) {
	lk := keys.For(dlock.DefaultPrefix, queuedKeyKind[kindName], name)
	if kindName == "RWMutex" {
		return lk, lk.SideChannel("w")
	}
	return lk, lk.Channel()
}

// waitersChannel is the channel beside base on which the waiters of the
// client that made tok (or a message that starts with it) hear their
// hand-offs: a token starts with its client's id (token.Of).
func waitersChannel(base, tok string) string {
	return keys.ClientChannel(base, tok[:2*token.ClientSize])
}

// nextMessage returns the next message sub receives but those skip
// passes over, failing t when none comes within 5s.
func nextMessage(t *testing.T, sub *redis.PubSub, skip func(*redis.Message) bool) *redis.Message {
	t.Helper()
	for {
		msg, err := sub.ReceiveTimeout(t.Context(), 5*time.Second)
		if err != nil {
			t.Fatalf("no message: %v", err)
		}
		if m, ok := msg.(*redis.Message); ok && !skip(m) {
			return m
		}
	}
}

// firstWaiters waits until queue holds at least n waiters, and returns
// their tokens, first first.
func firstWaiters(t *testing.T, rdb *redis.Client, queue string, n int) []string {
	t.Helper()
	var toks []string
	err := eventually(t.Context(), 5*time.Second, func() error {
		toks = rdb.ZRange(t.Context(), queue, 0, -1).Val()
		if len(toks) < n {
			return fmt.Errorf("%d waiters queued, want %d", len(toks), n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// TestShortHandOffEndsWithItsTTL: a release that hands the lock to a
// waiter keeps it for the waiter's liveness timeout (3s) until the
// waiter's first renewal sets its TTL. With a TTL under that and no
// automatic renewals, that first renewal is still sent, whether the
// waiter learns of the hand-off from its message or, the message lost,
// from a try that finds the lock held for it: a holder that then stops
// (renews nothing, never unlocks) keeps others out for about its TTL,
// and the lock is free once its lease is lost, not seconds later.
func TestShortHandOffEndsWithItsTTL(t *testing.T) {
	for _, k := range queuedKinds {
		for _, dropped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/message-lost=%v", k.name, dropped), func(t *testing.T) {
				srv, ctx := serve(t)
				name := "short-" + marker()
				p, waiterC, holderC := proxied(t, srv)
				const ttl = 400 * time.Millisecond
				lock := k.get(holderC, name)
				h := mustTake(t, ctx, lock.Lock)
				got := make(chan *dlock.Lease, 1)
				go func() {
					l, err := k.get(waiterC, name, dlock.WithTTL(ttl), dlock.WithAutoRefresh(false)).Lock(ctx)
					if err != nil {
						t.Error(err)
					}
					got <- l
				}()
				waitQueued(t, lock, 1)
				waitSubscribed(t, srv.Client(t), name)
				time.Sleep(100 * time.Millisecond) // the confirmation reaches the waiter's client; a Mutex's first waiter has waited over 1ms
				var lost <-chan struct{}
				if dropped {
					lost = p.DropPushed(name)
				}
				mustUnlock(t, h)
				if lost != nil {
					select {
					case <-lost:
					case <-time.After(5 * time.Second):
						t.Fatal("the proxy lost no message")
					}
				}
				l := <-got
				if l == nil {
					return
				}
				endsWithItsTTL(t, ctx, lock, l, ttl)
			})
		}
	}
}

// TestHandOffFromLastReader: the last reader's release hands an RWMutex
// to the first waiting writer, in either mode, with the message that
// wakes it: the writer sends no try of its own.
func TestHandOffFromLastReader(t *testing.T) {
	for _, mode := range []dlock.RWMode{dlock.PreferWriters, dlock.PreferReaders} {
		t.Run(mode.String(), func(t *testing.T) {
			srv, ctx := serve(t)
			readerC, _, _ := newClient(t, srv)
			tries := &triesBy{meta: "writer"}
			rdb := srv.Client(t)
			rdb.AddHook(tries)
			writerC := dlock.New(rdb)
			t.Cleanup(func() { writerC.Close() })

			opts := []dlock.LockOption{dlock.WithTTL(30 * time.Second), dlock.WithRWMode(mode)}
			rw := readerC.RWMutex("last-reader", opts...)
			r1, r2 := mustTake(t, ctx, rw.RLock), mustTake(t, ctx, rw.RLock)
			got := make(chan *dlock.Lease, 1)
			go func() {
				l, err := writerC.RWMutex("last-reader", append(opts, dlock.WithMetadata(tries.meta))...).Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			waitQueued(t, rw, 1)
			mustUnlock(t, r1)
			time.Sleep(5 * time.Millisecond) // past the millisecond a newcomer may barge in
			before := tries.n.Load()
			mustUnlock(t, r2)
			l := <-got
			if l == nil {
				return
			}
			defer mustUnlock(t, l)
			if n := tries.n.Load() - before; n != 0 {
				t.Errorf("the writer sent %d tries after the last reader left; want 0", n)
			}
			if l.Fence() <= r2.Fence() {
				t.Errorf("writer's fence %d after reader's %d", l.Fence(), r2.Fence())
			}
			if st := statusOf(t, rw); len(st.Waiters) != 0 || st.WriterWaiting {
				t.Errorf("status with the writer in: %+v; want no waiter, no intention", st)
			}
		})
	}
}

// TestHandOffToStoppedWaiter: the lock is handed to a waiter process that
// is stopped (SIGSTOP) and so cannot take it up. The next waiter gets it
// once the stopped one's liveness runs out, not after the 30s TTL; the
// stopped one, resumed, finds its hand-off stale and waits again rather
// than believing it holds the lock.
func TestHandOffToStoppedWaiter(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	f := c.FairMutex("stopped", dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, f.Lock)

	stopped := startHelper(t, srv, "queue", "stopped")
	waitQueued(t, f, 1)
	if err := stopped.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.FairMutex("stopped", dlock.WithTTL(30*time.Second), dlock.WithMetadata("live")).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, f, 2)
	mustUnlock(t, h)
	st, err := f.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Metadata != "doomed" || st.TTL > 3*time.Second {
		t.Fatalf("after the release: %+v; want it handed to the stopped waiter for at most 3s", st)
	}
	var live *dlock.Lease
	select {
	case live = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the live waiter still waits 10s after the hand-off to a stopped one")
	}
	if live == nil {
		return
	}

	// Resumed, the stopped waiter holds a stale hand-off: it must go on
	// waiting while the live waiter holds the lock.
	if err := stopped.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped.exited:
		t.Fatal("the resumed waiter's Lock returned while another held the lock")
	case <-time.After(1500 * time.Millisecond):
	}
	if held, err := live.Held(ctx); err != nil || !held {
		t.Fatalf("live lease Held = %v, %v", held, err)
	}
	mustUnlock(t, live)
	select {
	case <-stopped.exited: // it took the lock, as it should once it was free
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed waiter did not get the lock after it was released")
	}
}

// TestHandOffAsContextEnds: a waiter's context ends just as the release
// hands it the lock. Either it returns the lease, or it returns the
// context's error and the lock goes on to the next waiter at once, not
// after the hand-off would lapse.
func TestHandOffAsContextEnds(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t)
			holderC, _, _ := newClient(t, srv)
			otherC, _, _ := newClient(t, srv)
			outcomes := map[bool]int{}
			for range 8 {
				lock := k.get(holderC, "ctx-ends", dlock.WithTTL(30*time.Second))
				h := mustTake(t, ctx, lock.Lock)
				waiterC, _, _ := newClient(t, srv)
				wctx, cancel := context.WithCancel(ctx)
				res := make(chan error, 1)
				go func() {
					l, err := k.get(waiterC, "ctx-ends", dlock.WithMetadata("w")).Lock(wctx)
					if err == nil {
						err = l.Unlock(ctx)
					}
					res <- err
				}()
				waitQueued(t, lock, 1)
				next := takeAndRelease(ctx, func(ctx context.Context) (*dlock.Lease, error) {
					return k.get(otherC, "ctx-ends", dlock.WithMetadata("next")).Lock(ctx)
				})
				waitQueued(t, lock, 2)
				time.Sleep(5 * time.Millisecond)
				mustUnlock(t, h)
				cancel()
				err := <-res
				outcomes[err == nil]++
				if err != nil && (!errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled)) {
					t.Fatalf("waiter: %v", err)
				}
				// Close waits for the waiter's give-up: by then the lock
				// must not be the cancelled waiter's.
				waiterC.Close()
				if st, err := lock.Status(ctx); err != nil || st.Metadata == "w" {
					t.Fatalf("after the cancelled waiter left: %+v, %v", st, err)
				}
				within(t, next, 2*time.Second, "the next waiter did not get the lock the cancelled one left")
			}
			t.Logf("lease taken %d times, context error %d times", outcomes[true], outcomes[false])
		})
	}
}

// TestLostHandOffMessage: the message that hands the lock over is lost
// with the subscription connection. The waiter still gets the lock, from
// its own heartbeat try or the hub's wake-up after reconnecting, which
// find the lock held for it; long before the holder's TTL, and within
// the hand-off's liveness.
func TestLostHandOffMessage(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t)
			name := "lost-" + marker()
			p, waiterC, holderC := proxied(t, srv)
			admin := srv.Client(t)
			lock := k.get(holderC, name, dlock.WithTTL(30*time.Second))
			h := mustTake(t, ctx, lock.Lock)
			got := make(chan *dlock.Lease, 1)
			go func() {
				l, err := k.get(waiterC, name, dlock.WithTTL(30*time.Second)).Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			waitQueued(t, lock, 1)
			waitSubscribed(t, admin, name)
			time.Sleep(100 * time.Millisecond) // the confirmation reaches the waiter's client
			lost := p.DropPushed(name)
			mustUnlock(t, h)
			select {
			case <-lost:
			case <-time.After(5 * time.Second):
				t.Fatal("the proxy lost no message")
			}
			select {
			case l := <-got:
				if l == nil {
					return
				}
				if l.Fence() <= h.Fence() {
					t.Errorf("fence %d after %d", l.Fence(), h.Fence())
				}
				if held, err := l.Held(ctx); err != nil || !held {
					t.Errorf("Held = %v, %v", held, err)
				}
				mustUnlock(t, l)
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter still waits 10s after its hand-off message was lost")
			}
		})
	}
}

// waitSubscribed waits until some client listens on the release channel
// of the lock called name.
func waitSubscribed(t *testing.T, admin *redis.Client, name string) {
	t.Helper()
	err := eventually(t.Context(), 5*time.Second, func() error {
		chans, err := admin.PubSubChannels(t.Context(), "*"+name+"*").Result()
		if err == nil && len(chans) == 0 {
			err = fmt.Errorf("no subscription to a channel of %q", name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHandOffsAcrossRestart: goroutines on two clients hand a lock round
// while Redis is killed and restarted from its AOF. Holders never
// overlap while their leases stand, and every goroutine completes its
// acquisitions once Redis is back.
func TestHandOffsAcrossRestart(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			clients := []*dlock.Client{}
			for range 2 {
				c, _, _ := newClient(t, srv)
				clients = append(clients, c)
			}
			var holders atomic.Int32
			var overlaps, done atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			const rounds = 30
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lock := k.get(clients[i%2], "restart", dlock.WithTTL(2*time.Second))
					for range rounds {
						l, err := lock.Lock(ctx)
						if err != nil {
							if ctx.Err() != nil {
								errs <- err
								return
							}
							continue // Redis was down: try again
						}
						if holders.Add(1) > 1 {
							select {
							case <-l.Lost():
							default:
								overlaps.Add(1)
							}
						}
						time.Sleep(2 * time.Millisecond)
						holders.Add(-1)
						_ = l.Unlock(ctx) // may fail while Redis is down
						done.Add(1)
					}
				}()
			}
			for done.Load() < 8*rounds/3 && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			srv.Restart(t)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("goroutine gave up: %v", err)
			}
			if n := overlaps.Load(); n > 0 {
				t.Errorf("%d times two holders at once", n)
			}
			if n := done.Load(); n != 8*rounds {
				t.Errorf("%d acquisitions of %d", n, 8*rounds)
			}
		})
	}
}

// queuedKeyKind is the key kind of each of queuedKinds.
var queuedKeyKind = map[string]string{
	"Mutex": keys.KindMutex, "FairMutex": keys.KindFair, "RWMutex": keys.KindRW,
	"MutexSet": keys.KindSet, "Semaphore": keys.KindSem, "Election": keys.KindElect,
}

// firstWaiterAfterBeat waits until Redis has run a heartbeat of the first
// waiter queued for the lock name of the given kind (its liveness
// deadline moved), so that the steps after it run well before the next
// one, and returns that waiter's token.
func firstWaiterAfterBeat(t *testing.T, rdb *redis.Client, kind, name string) string {
	t.Helper()
	ctx := t.Context()
	k := keys.For(dlock.DefaultPrefix, kind, name)
	first, err := rdb.ZRange(ctx, k.Part("queue"), 0, 0).Result()
	if err != nil || len(first) != 1 {
		t.Fatalf("the first waiter: %v, %v", first, err)
	}
	was := rdb.ZScore(ctx, k.Part("alive"), first[0]).Val()
	if err := eventually(ctx, 5*time.Second, func() error {
		if rdb.ZScore(ctx, k.Part("alive"), first[0]).Val() == was {
			return errors.New("the first waiter's heartbeat did not move its deadline in 5 s")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return first[0]
}

// orphanFirstWaiter removes, right after its heartbeat (see
// firstWaiterAfterBeat), the liveness entry of the first waiter queued for
// the lock name of the given kind, as an operator or an eviction of the
// liveness key alone might, and returns its token.
func orphanFirstWaiter(t *testing.T, rdb *redis.Client, kind, name string) string {
	t.Helper()
	tok := firstWaiterAfterBeat(t, rdb, kind, name)
	k := keys.For(dlock.DefaultPrefix, kind, name)
	if n, err := rdb.ZRem(t.Context(), k.Part("alive"), tok).Result(); n != 1 || err != nil {
		t.Fatalf("removing the first waiter's liveness entry: %d, %v", n, err)
	}
	return tok
}

// TestWaiterWithUnreadableEntry: a waiter first in line whose entry dlock
// cannot read (something else wrote it: not a request, or one that can
// never fit) would fail every release and try of a MutexSet, or hold up a
// Semaphore's line for ever; the release drops it instead, and it queues
// again at its next heartbeat and gets the lock.
func TestWaiterWithUnreadableEntry(t *testing.T) {
	for _, tc := range []struct {
		kind, entry string
	}{
		{"Semaphore", "not a request"},
		{"Semaphore", "2:1:more than its size"},
		{"Semaphore", "0:1:no permit"},
		{"MutexSet", "not an entry"},
	} {
		t.Run(tc.kind+"/"+tc.entry, func(t *testing.T) {
			srv, ctx := serve(t)
			c, rdb, _ := newClient(t, srv)
			var get func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock
			for _, k := range queuedKinds {
				if k.name == tc.kind {
					get = k.get
				}
			}
			held := mustTake(t, ctx, get(c, "garbled").Lock)
			wc, _, _ := newClient(t, srv)
			waiter := async(t, ctx, get(wc, "garbled").Lock)
			waitQueued(t, get(c, "garbled"), 1)
			kind := queuedKeyKind[tc.kind]
			tok := firstWaiterAfterBeat(t, rdb, kind, "garbled")
			k := keys.For(dlock.DefaultPrefix, kind, "garbled")
			if err := rdb.HSet(ctx, k.Part("wmeta"), tok, tc.entry).Err(); err != nil {
				t.Fatal(err)
			}
			mustUnlock(t, held)
			select {
			case l := <-waiter:
				// It holds what it asked for, not what its entry said.
				var other *dlock.Lease
				var err error
				switch l := get(c, "garbled").(type) {
				case onePermit:
					other, err = l.TryLock(ctx)
				case oneMember:
					other, err = l.TryAcquire(ctx)
				}
				if !errors.Is(err, dlock.ErrNotAcquired) {
					t.Errorf("while the waiter holds the lock, another try got %v (err %v); want ErrNotAcquired", other != nil, err)
				}
				mustUnlock(t, l)
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter whose entry was unreadable did not get the lock")
			}
		})
	}
}

// TestReadersWithoutExpiry: read shares whose expiry entries are gone (an
// operator, or an eviction of the expiry key) are dropped as dead by a
// writer's try, a hundred a try, and their holders are told the shares
// are lost; the writer then takes the lock.
func TestReadersWithoutExpiry(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	rw := c.RWMutex("orphans")
	lone := mustTake(t, ctx, rw.TryRLock) // kept in the owner key, as the first share is
	shares := make([]*dlock.Lease, 150)
	for i := range shares {
		shares[i] = mustTake(t, ctx, rw.TryRLock)
	}
	mustUnlock(t, lone)
	if err := rdb.Del(ctx, keys.For(dlock.DefaultPrefix, keys.KindRW, "orphans").Part("rexp")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock past 150 readers without expiry: %v, want ErrNotAcquired (a hundred dropped)", err)
	}
	w := mustTake(t, ctx, rw.TryLock)
	for i, l := range shares {
		select {
		case <-l.Lost():
		case <-time.After(15 * time.Second):
			t.Fatalf("read share %d not told it was lost", i)
		}
	}
	mustUnlock(t, w)
}

// TestWaiterWithoutQueue: a waiter whose line was removed (its queue key
// deleted by something other than dlock, its liveness entry left) is not
// stranded once the lock is let go with nobody to hand it to: its next
// heartbeat has it try (a Semaphore's waiter slept until its ctx ended).
func TestWaiterWithoutQueue(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t)
			c, rdb, _ := newClient(t, srv)
			held := mustTake(t, ctx, k.get(c, "lineless").Lock)
			wc, _, _ := newClient(t, srv)
			waiter := async(t, ctx, k.get(wc, "lineless").Lock)
			waitQueued(t, k.get(c, "lineless"), 1)
			queue := keys.For(dlock.DefaultPrefix, queuedKeyKind[k.name], "lineless").Part("queue")
			if n, err := rdb.Del(ctx, queue).Result(); n != 1 || err != nil {
				t.Fatalf("deleting %s: %d, %v", queue, n, err)
			}
			mustUnlock(t, held)
			mustUnlock(t, receive(t, waiter, "the waiter whose line was removed, the lock free"))
		})
	}
}

// TestWaiterWithoutLiveness: a queued waiter whose liveness entry is gone
// (something other than dlock removed it), which no prune would drop, is
// passed over as dead, for every queued kind: a release hands the lock to
// the next live waiter in the same script, and a try that finds the lock
// free takes it when nobody else waits (the Semaphore's and the MutexSet's
// releases and every kind's try failed with a script error before). The
// waiter passed over is not lost: its next heartbeat queues it again, and
// it gets the lock in turn.
func TestWaiterWithoutLiveness(t *testing.T) {
	for _, k := range queuedKinds {
		t.Run(k.name+"/release", func(t *testing.T) {
			srv, ctx := serve(t)
			c, rdb, _ := newClient(t, srv)
			held := mustTake(t, ctx, k.get(c, "ghost").Lock)
			waiting := map[string]<-chan *dlock.Lease{}
			for i, name := range []string{"B", "C"} {
				wc, _, _ := newClient(t, srv)
				waiting[name] = async(t, ctx, k.get(wc, "ghost", dlock.WithMetadata(name)).Lock)
				waitQueued(t, k.get(c, "ghost"), i+1)
			}
			orphanFirstWaiter(t, rdb, queuedKeyKind[k.name], "ghost")
			mustUnlock(t, held)
			select {
			case l := <-waiting["C"]:
				select {
				case <-waiting["B"]:
					t.Fatal("B holds the lock with C")
				default:
				}
				mustUnlock(t, l)
			case <-waiting["B"]:
				t.Fatal("the lock went to B, whose liveness entry was gone, not to C")
			case <-time.After(5 * time.Second):
				t.Fatal("C, the first live waiter, did not get the lock")
			}
			select {
			case l := <-waiting["B"]:
				mustUnlock(t, l)
			case <-time.After(10 * time.Second):
				t.Fatal("B, passed over, did not get the lock once C let it go")
			}
		})
		if k.name == "MutexSet" {
			continue // a member free with a queue comes only from a release
		}
		t.Run(k.name+"/try", func(t *testing.T) {
			srv, ctx := serve(t)
			c, rdb, _ := newClient(t, srv)
			kind := queuedKeyKind[k.name]
			mustTake(t, ctx, k.get(c, "ghost").Lock)
			wc, _, _ := newClient(t, srv)
			waiter := async(t, ctx, k.get(wc, "ghost", dlock.WithMetadata("B")).Lock)
			waitQueued(t, k.get(c, "ghost"), 1)
			b := orphanFirstWaiter(t, rdb, kind, "ghost")
			key := keys.For(dlock.DefaultPrefix, kind, "ghost")
			if kind != keys.KindSem {
				// Free the lock as an expiry would, but for the waiter. (A
				// Semaphore's try reads its first waiter while held.)
				if err := rdb.Del(ctx, key.Key()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			try := k.get(c, "ghost").(interface {
				TryLock(context.Context) (*dlock.Lease, error)
			}).TryLock
			l, err := try(ctx)
			if first := rdb.ZRange(ctx, key.Part("queue"), 0, 0).Val(); slices.Contains(first, b) {
				t.Errorf("after a try, B is first in the queue still (%v, %v)", err, first)
			}
			switch {
			case kind == keys.KindSem && !errors.Is(err, dlock.ErrNotAcquired):
				t.Fatalf("TryLock with the permit held: %v, want ErrNotAcquired", err)
			case kind == keys.KindSem:
				if err := rdb.Del(ctx, key.Key(), key.Part("leases")).Err(); err != nil {
					t.Fatal(err)
				}
				l = mustTake(t, ctx, try) // B was dropped: nobody comes first
			case err != nil:
				t.Fatalf("TryLock on a free lock whose only waiter has no liveness entry: %v", err)
			}
			mustUnlock(t, l)
			select {
			case l := <-waiter:
				mustUnlock(t, l)
			case <-time.After(10 * time.Second):
				t.Fatal("B, passed over, did not get the lock")
			}
		})
	}
}

// TestHandOffAfterLostJoinReplyEndsWithItsTTL: a Lock whose first
// try (the one that queued it) loses its reply, and to which a release
// then hands the lock, learns of it from its next try: dlock's own, or
// go-redis' resending the lost request by itself (its default retries,
// unseen by dlock). With a TTL under the hand-off window and no automatic
// renewals, the README promises the lock ends about its TTL after the
// holder stops, not 3s later.
func TestHandOffAfterLostJoinReplyEndsWithItsTTL(t *testing.T) {
	for _, retry := range []struct {
		name    string
		proxied func(*testing.T, *redistest.Server) (*redistest.Proxy, *dlock.Client, *dlock.Client)
	}{{"dlock", proxied}, {"go-redis", proxiedRetrying}} {
		for _, k := range queuedKinds {
			t.Run(retry.name+"/"+k.name, func(t *testing.T) {
				lostJoinReplyEndsWithItsTTL(t, k.get, retry.proxied)
			})
		}
	}
}

// lostJoinReplyEndsWithItsTTL is TestHandOffAfterLostJoinReplyEndsWithItsTTL
// for one kind of lock, its clients from proxied.
func lostJoinReplyEndsWithItsTTL(t *testing.T, get func(c *dlock.Client, name string, opts ...dlock.LockOption) queuedLock, proxied func(*testing.T, *redistest.Server) (*redistest.Proxy, *dlock.Client, *dlock.Client)) {
	srv, ctx := serve(t)
	name := "lostjoin-" + marker()
	p, waiterC, holderC := proxied(t, srv)
	const ttl = 400 * time.Millisecond
	lock := get(holderC, name)
	h := mustTake(t, ctx, lock.Lock)
	meta := "waiter-" + marker()
	dropped := p.DropReply(meta, false, func() {
		// Redis ran the waiter's first try (it queued); the holder
		// lets go before the waiter hears of it, once the waiter has
		// waited over a Mutex's 1ms.
		time.Sleep(10 * time.Millisecond)
		if err := h.Unlock(context.Background()); err != nil {
			t.Error(err)
		}
	})
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := get(waiterC, name, dlock.WithTTL(ttl), dlock.WithAutoRefresh(false), dlock.WithMetadata(meta)).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	receive(t, dropped, "the lost reply")
	l := receive(t, got, "the lease")
	if l == nil {
		return
	}
	endsWithItsTTL(t, ctx, lock, l, ttl)
}

// endsWithItsTTL waits for l, a lease of ttl that is not renewed, to be
// lost, and then for lock to be free within a second: its holder gone,
// the lock is not kept past its TTL.
func endsWithItsTTL(t *testing.T, ctx context.Context, lock interface {
	Status(context.Context) (dlock.Status, error)
}, l *dlock.Lease, ttl time.Duration) {
	t.Helper()
	receive(t, l.Lost(), fmt.Sprintf("the Lost() of a lease of TTL %v, not renewed", ttl))
	at := time.Now()
	err := eventually(ctx, time.Second, func() error {
		if st := statusOf(t, lock); st.Held {
			return fmt.Errorf("still held %v after its lease of TTL %v was lost (TTL left %v)", time.Since(at), ttl, st.TTL)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
