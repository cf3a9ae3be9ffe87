package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// newRedlock starts n independent servers and a Redlock client on them.
func newRedlock(t testing.TB, n int, opts ...dlock.Option) (*dlock.Client, []*redistest.Server, *hook) {
	t.Helper()
	srvs := redistest.StartN(t, n)
	cnt := &hook{}
	rdbs := make([]redis.UniversalClient, n)
	for i, s := range srvs {
		rdb := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		rdb.AddHook(cnt)
		rdbs[i] = rdb
	}
	c := dlock.NewRedlock(rdbs, opts...)
	t.Cleanup(func() { c.Close() })
	return c, srvs, cnt
}

func TestRedlockTryLockUnlock(t *testing.T) {
	t.Parallel()
	c, srvs, cnt := newRedlock(t, 5)
	ctx := t.Context()
	m := c.Mutex("job", dlock.WithMetadata("host-a"))

	if _, err := c.Mutex("warm-up").Status(ctx); err != nil { // loads the scripts
		t.Fatal(err)
	}
	if l, err := c.Mutex("warm-up").TryLock(ctx); err != nil {
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	before := cnt.n.Load()
	l := mustTake(t, ctx, m.TryLock)
	if n := cnt.n.Load() - before; n != 5 {
		t.Errorf("TryLock sent %d commands, want 5 (one per node, in parallel)", n)
	}
	// Every node holds a share.
	for i, s := range srvs {
		if n := s.Client(t).Exists(ctx, "dlock:{job}:mutex").Val(); n != 1 {
			t.Errorf("node %d holds no share", i)
		}
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second TryLock: %v, want ErrNotAcquired", err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Metadata != "host-a" || st.Fence != l.Fence() || st.TTL <= 0 {
		t.Errorf("status %+v, want held by host-a with fence %d", st, l.Fence())
	}
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Errorf("Held: %v, %v", ok, err)
	}
	if err := l.Refresh(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.Status(ctx); st.Held {
		t.Errorf("held after Unlock: %+v", st)
	}
	l2 := mustTake(t, ctx, m.TryLock)
	defer l2.Unlock(ctx)
	if l2.Fence() <= l.Fence() {
		t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
	}
}

// TestRedlockMajority: with 3 of 5 nodes up the lock works; with 2 up,
// Lock fails when its ctx ends, saying why.
func TestRedlockMajority(t *testing.T) {
	t.Parallel()
	c, srvs, _ := newRedlock(t, 5)
	ctx := t.Context()
	m := c.Mutex("quorum", dlock.WithTTL(2*time.Second))

	srvs[0].Kill(t)
	srvs[1].Kill(t)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with 3 of 5 nodes up: %v", err)
	}
	// Renewals keep it on the three.
	time.Sleep(2500 * time.Millisecond)
	select {
	case <-l.Lost():
		t.Fatal("lease lost with 3 of 5 nodes up")
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with 3 of 5 nodes up: %v", err)
	}

	srvs[2].Kill(t)
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	_, err = m.Lock(lctx)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with 2 of 5 nodes up: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "3 of 5 Redis masters failed") {
		t.Errorf("error %q does not say that a majority is down", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Lock returned %v after a 1s deadline", d)
	}
	t.Logf("with 2 of 5 up: %v", err)
	_, err = m.TryLock(ctx)
	if err == nil || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock with 2 of 5 nodes up: %v, want an error that is not ErrNotAcquired", err)
	}
}

// TestRedlockPausedNode: a node that stops answering (SIGSTOP) delays an
// acquisition by the per-node timeout (TTL/20 = 100ms here), not by the
// client's 3s read timeout, and then rests instead of being asked again.
func TestRedlockPausedNode(t *testing.T) {
	t.Parallel()
	c, srvs, _ := newRedlock(t, 5)
	ctx := t.Context()
	m := c.Mutex("paused", dlock.WithTTL(2*time.Second))
	if l, err := m.TryLock(ctx); err != nil { // connections open
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	srvs[3].Pause(t)
	defer srvs[3].Resume(t)
	for i := range 5 {
		start := time.Now()
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock %d with a paused node: %v", i, err)
		}
		took := time.Since(start)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d with a paused node: %v", i, err)
		}
		t.Logf("TryLock %d with a paused node took %v", i, took)
		if took > 2*time.Second {
			t.Errorf("TryLock %d took %v with a paused node: the per-node timeout is 100ms", i, took)
		}
	}
	// A waiter subscribes on the live nodes and is woken by a release.
	l := mustTake(t, ctx, m.Lock)
	got := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		l2, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		} else if err := l2.Unlock(ctx); err != nil {
			t.Error(err)
		}
		got <- time.Since(start)
	}()
	time.Sleep(200 * time.Millisecond)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		t.Logf("a waiter got the lock and released it %v after it called Lock", d)
	case <-time.After(5 * time.Second):
		t.Fatal("waiter stuck with one node paused")
	}
}

func TestRedlockWakesWaiter(t *testing.T) {
	t.Parallel()
	c, _, _ := newRedlock(t, 3)
	ctx := t.Context()
	m := c.Mutex("wake", dlock.WithTTL(30*time.Second))
	l := mustTake(t, ctx, m.Lock)
	got := takeAndRelease(ctx, m.Lock)
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("waiter got the lock %v after the release", time.Since(released))
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the release (TTL 30s)")
	}
}

// TestRedlockWaiterBesideMajorityWaits: while a lease holds a majority
// and another node is free (its share lost, as a node restarted without
// persistence loses it), a waiter's try takes the free node and gives it
// back; that give-back must not wake the waiter, or it tries again at
// once for as long as the lease holds (thousands of tries a second).
func TestRedlockWaiterBesideMajorityWaits(t *testing.T) {
	t.Parallel()
	c, srvs, cnt := newRedlock(t, 3)
	ctx := t.Context()
	m := c.Mutex("beside", dlock.WithTTL(3*time.Second))
	l := mustTake(t, ctx, m.Lock)
	if err := srvs[2].Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sent := cnt.Load()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := m.Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock beside a majority held: %v, want the deadline", err)
	}
	// A try is three scripts, one a node, and a renewal of the lease
	// three more; the waiter tries once, and again if the lease's
	// shortest share nears its end within the second.
	if n := cnt.Load() - sent; n > 30 {
		t.Errorf("a waiter beside a lease holding a majority sent %d commands in 1s, want a few", n)
	}
	select {
	case <-l.Lost():
		t.Fatal("the lease was lost with a majority held")
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// newProxiedRedlock is newRedlock with each node behind a proxy that can
// cut it off.
func newProxiedRedlock(t testing.TB, n int, opts ...dlock.Option) (*dlock.Client, []*redistest.Server, []*redistest.Proxy) {
	t.Helper()
	srvs := redistest.StartN(t, n)
	ps := make([]*redistest.Proxy, n)
	rdbs := make([]redis.UniversalClient, n)
	for i, s := range srvs {
		ps[i] = redistest.StartProxy(t, s.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: ps[i].Addr(), MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		rdbs[i] = rdb
	}
	c := dlock.NewRedlock(rdbs, opts...)
	t.Cleanup(func() { c.Close() })
	return c, srvs, ps
}

// TestRedlockUnlockOnAMinority: an Unlock that fails, then gets through
// to one node of three, has not released the lease: the other two still
// hold its shares (a majority). Unlock says ErrLost and Lost() closes, not
// nil, and the release goes on in the background, freeing the other
// nodes once they are back rather than at the end of the TTL.
func TestRedlockUnlockOnAMinority(t *testing.T) {
	t.Parallel()
	c, srvs, ps := newProxiedRedlock(t, 3)
	ctx := t.Context()
	const owner = "dlock:{minority}:mutex"
	l := mustTake(t, ctx, c.Mutex("minority", dlock.WithTTL(10*time.Second)).Lock)
	for _, p := range ps {
		p.Cut(true)
	}
	uctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := l.Unlock(uctx); err == nil {
		t.Fatal("Unlock with every node cut off: no error")
	}
	ps[0].Cut(false)
	if err := eventually(ctx, 5*time.Second, func() error { return gone(ctx, srvs[:1], owner) }); err != nil {
		t.Fatalf("the background release did not reach node 0: %v", err)
	}
	uctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := l.Unlock(uctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock released on 1 node of 3: %v, want ErrLost", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Error("Lost() open after an Unlock confirmed by 1 node of 3")
	}
	ps[1].Cut(false)
	ps[2].Cut(false)
	if err := eventually(ctx, 5*time.Second, func() error { return gone(ctx, srvs[1:], owner) }); err != nil {
		t.Errorf("the release did not go on in the background (TTL 10s): %v", err)
	}
}

// TestRedlockTryLockGivesBackInBackground: a TryLock whose try took a
// node it never heard from, and could not give that share back then,
// gives it back in the background once the node answers again, rather
// than leave it there for the whole TTL.
func TestRedlockTryLockGivesBackInBackground(t *testing.T) {
	t.Parallel()
	c, srvs, ps := newProxiedRedlock(t, 3)
	ctx := t.Context()
	const owner = "dlock:{leftover}:mutex"
	x := mustTake(t, ctx, c.Mutex("leftover", dlock.WithTTL(20*time.Second)).Lock)
	if err := srvs[2].Client(t).FlushAll(ctx).Err(); err != nil { // x holds nodes 0 and 1
		t.Fatal(err)
	}
	dropped := ps[2].DropReply("leftover-try", false, func() { ps[2].Cut(true) })
	_, err := c.Mutex("leftover", dlock.WithTTL(20*time.Second), dlock.WithMetadata("leftover-try")).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a lock held on a majority: %v, want ErrNotAcquired", err)
	}
	<-dropped
	if err := gone(ctx, srvs[2:], owner); err == nil {
		t.Fatal("the try took no share on node 2: the test tests nothing")
	}
	ps[2].Cut(false)
	if err := eventually(ctx, 5*time.Second, func() error { return gone(ctx, srvs[2:], owner) }); err != nil {
		t.Errorf("the try's share outlived it (TTL 20s): %v", err)
	}
	if err := x.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// gone says which of srvs still have key.
func gone(ctx context.Context, srvs []*redistest.Server, key string) error {
	for _, s := range srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		n, err := rdb.Exists(ctx, key).Result()
		rdb.Close()
		if err == nil && n > 0 {
			err = fmt.Errorf("%s still has %s", s.Addr(), key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TestRedlockLostOnMajorityFlush: a lease whose shares vanish from a
// majority of nodes is lost; from a minority, it is not.
func TestRedlockLostOnMajorityFlush(t *testing.T) {
	t.Parallel()
	c, srvs, _ := newRedlock(t, 5)
	ctx := t.Context()
	l := mustTake(t, ctx, c.Mutex("flush", dlock.WithTTL(900*time.Millisecond)).Lock)
	for _, s := range srvs[:2] {
		s.Client(t).FlushAll(ctx)
	}
	time.Sleep(1200 * time.Millisecond)
	select {
	case <-l.Lost():
		t.Fatal("lost with a majority of shares left")
	default:
	}
	srvs[2].Client(t).FlushAll(ctx)
	select {
	case <-l.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("Lost() not closed after a majority of shares vanished")
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock: %v, want ErrLost", err)
	}
}

func TestRedlockUnsupported(t *testing.T) {
	t.Parallel()
	c, _, _ := newRedlock(t, 3)
	ctx := t.Context()
	calls := map[string]func() error{
		"FairMutex.Lock":   func() error { _, err := c.FairMutex("x").Lock(ctx); return err },
		"FairMutex.Status": func() error { _, err := c.FairMutex("x").Status(ctx); return err },
		"RWMutex.RLock":    func() error { _, err := c.RWMutex("x").RLock(ctx); return err },
		"RWMutex.TryLock":  func() error { _, err := c.RWMutex("x").TryLock(ctx); return err },
		"MutexSet.Add":     func() error { return c.MutexSet("x").Add(ctx, "a") },
		"MutexSet.Acquire": func() error { _, err := c.MutexSet("x").Acquire(ctx); return err },
		"Inspect":          func() error { _, err := c.Inspect(ctx, "x"); return err },
		"List":             func() error { _, err := c.List(ctx, ""); return err },
		"ForceUnlock":      func() error { _, err := c.ForceUnlock(ctx, "x"); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, dlock.ErrUnsupported) {
			t.Errorf("%s on Redlock: %v, want ErrUnsupported", name, err)
		}
	}
}

func TestRedlockBadInput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for name, c := range map[string]*dlock.Client{
		"no nodes": dlock.NewRedlock(nil),
		"nil node": dlock.NewRedlock([]redis.UniversalClient{nil}),
	} {
		if _, err := c.Mutex("x").TryLock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	c, _, _ := newRedlock(t, 1)
	if _, err := c.Mutex("x", dlock.WithNoExpiry()).TryLock(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("WithNoExpiry: %v, want ErrInvalid", err)
	}
	if _, err := c.Mutex("").TryLock(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("empty name: %v, want ErrInvalid", err)
	}
	l := mustTake(t, ctx, c.Mutex("x").TryLock)
	if err := l.Refresh(ctx, time.Millisecond); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Refresh under Redlock's minimum TTL: %v, want ErrInvalid", err)
	}
	select {
	case <-l.Lost():
		t.Error("a refused Refresh closed Lost()")
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRedlockExclusionGoroutines(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	marker := filepath.Join(t.TempDir(), "held")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	var fences []uint64
	record := func(f uint64) { mu.Lock(); fences = append(fences, f); mu.Unlock() }
	const clients, workers = 2, 4
	errs := make([]error, clients*workers)
	var wg sync.WaitGroup
	for ci := range clients {
		rdbs := make([]redis.UniversalClient, len(srvs))
		for i, s := range srvs {
			rdbs[i] = s.Client(t)
		}
		c := dlock.NewRedlock(rdbs)
		t.Cleanup(func() { c.Close() })
		for wi := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[ci*workers+wi] = contend(ctx, c.Mutex("shared", dlock.WithTTL(5*time.Second)), marker, time.Millisecond, record)
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(fences) < clients*workers {
		t.Fatalf("only %d acquisitions in 3s", len(fences))
	}
	checkIncreasing(t, fences)
	t.Logf("%d acquisitions in 3s", len(fences))
}

func TestRedlockExclusionProcesses(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.Addr()
	}
	runContenders(t, strings.Join(addrs, ","), "redlock")
}

// helperClient is the client of a contender process: DLOCK_TEST_ADDR is
// one address, or for kind redlock a comma-separated list of masters.
func helperClient(kind string) (*dlock.Client, func()) {
	addrs := strings.Split(os.Getenv("DLOCK_TEST_ADDR"), ",")
	var rdbs []redis.UniversalClient
	for _, a := range addrs {
		rdbs = append(rdbs, redis.NewClient(&redis.Options{Addr: a}))
	}
	var c *dlock.Client
	if kind == "redlock" {
		c = dlock.NewRedlock(rdbs)
	} else {
		c = dlock.New(rdbs[0])
	}
	return c, func() {
		c.Close()
		for _, r := range rdbs {
			r.Close()
		}
	}
}

// TestRedlockRestsDeadNode: a node that refuses connections is not asked
// on every try: after a failure it rests (50ms, doubling to 2s).
func TestRedlockRestsDeadNode(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	dials := &hook{}
	rdbs := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		rdb := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		if i == 2 {
			rdb.AddHook(dials)
		}
		rdbs[i] = rdb
	}
	c := dlock.NewRedlock(rdbs)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	m := c.Mutex("rest", dlock.WithTTL(time.Second))
	srvs[2].Kill(t)
	const tries = 300
	start := time.Now()
	for range tries {
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock with 2 of 3 up: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	// Each rest ends in one new attempt; rests double from 50ms.
	n := dials.dials.Load()
	t.Logf("%d TryLock+Unlock in %v: %d dials to the dead node", tries, took, n)
	if limit := int64(took/(50*time.Millisecond)) + 5; n > limit {
		t.Errorf("%d dials to the dead node in %v; with rests, at most %d", n, took, limit)
	}
}

// TestRedlockFailedUnlockReleasesInBackground: an Unlock that reaches no
// master releases in the background once they are back, and a second
// Unlock running beside that release is safe (and reports success).
func TestRedlockFailedUnlockReleasesInBackground(t *testing.T) {
	t.Parallel()
	c, srvs, _ := newRedlock(t, 3)
	l, err := c.Mutex("bg", dlock.WithTTL(30*time.Second)).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		s.Pause(t)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := l.Unlock(ctx); err == nil {
		t.Fatal("Unlock with every master paused: no error")
	}
	for _, s := range srvs {
		s.Resume(t)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Errorf("Unlock again: %v, want nil", err)
	}
	lctx, lcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer lcancel()
	next, err := c.Mutex("bg").Lock(lctx)
	if err != nil {
		t.Fatalf("Lock after the failed Unlock: %v; want the lock released", err)
	}
	_ = next.Unlock(t.Context())
}

// TestRedlockStatusShowsTheMajorityHolder: A holds a Redlock on 3
// masters and unlocks while cut off from master 0 (2 of 3 released, a
// majority: Unlock succeeds; A's share on master 0 lives on to its TTL).
// B then takes the lock on masters 1 and 2. Status must describe B, the
// holder of a majority; it reports A's share on master 0 instead.
func TestRedlockStatusShowsTheMajorityHolder(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	ctx := t.Context()
	proxy := redistest.StartProxy(t, srvs[0].Addr())
	direct := make([]redis.UniversalClient, 3)
	viaProxy := make([]redis.UniversalClient, 3)
	for i, s := range srvs {
		direct[i] = s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		viaProxy[i] = direct[i]
	}
	p := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { p.Close() })
	viaProxy[0] = p
	ca := dlock.NewRedlock(viaProxy)
	cb := dlock.NewRedlock(direct)
	t.Cleanup(func() { ca.Close(); cb.Close() })

	a, err := ca.Mutex("job", dlock.WithTTL(20*time.Second), dlock.WithMetadata("host-a")).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Cut(true)
	if err := a.Unlock(ctx); err != nil {
		t.Logf("A's Unlock: %v", err)
	}
	b, err := cb.Mutex("job", dlock.WithTTL(10*time.Second), dlock.WithMetadata("host-b")).TryLock(ctx)
	if err != nil {
		t.Fatalf("B's TryLock: %v", err)
	}
	defer b.Unlock(ctx)
	st, err := cb.Mutex("job").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status %+v; B's fence %d", st, b.Fence())
	if !st.Held || st.Metadata != "host-b" || st.Fence != b.Fence() {
		t.Errorf("Status while B holds masters 1 and 2 (A's stale share on 0): Held %v, Metadata %q, Fence %d, TTL %v; want held by host-b with fence %d",
			st.Held, st.Metadata, st.Fence, st.TTL, b.Fence())
	}
}

// TestRedlockUnconfirmedAfterLostReplyReleasesInBackground: Unlock's
// first attempt gets no reply from any node (node 0 ran it: its reply was
// lost), and nodes 1 and 2 stay unreachable for the whole Unlock (a
// failed dial: nothing sent). Its later attempts count node 0 released
// (its share gone after its own lost reply), a minority: ErrLost.
// README (Redlock, Unlock): "the release goes on in the background on
// the rest until it gets through or they expire with their TTL": the
// earlier attempts of the same Unlock are no background release, and the
// shares on nodes 1 and 2 must go once they are reachable (they stayed
// for their whole TTL).
func TestRedlockUnconfirmedAfterLostReplyReleasesInBackground(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	hooks := make([]*stepHook, 3)
	rdbs := make([]redis.UniversalClient, 3)
	for i, s := range srvs {
		rdb := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		hooks[i] = &stepHook{}
		rdb.AddHook(hooks[i])
		rdbs[i] = rdb
	}
	c := dlock.NewRedlock(rdbs)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	warm := mustTake(t, ctx, c.Mutex("rl").TryLock) // loads the scripts
	mustUnlock(t, warm)
	l, err := c.Mutex("rl", dlock.WithTTL(20*time.Second)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	var tries [3]atomic.Int32
	// Nodes 1 and 2 refuse every release numbered up to cut on each (the
	// nth on one node is the nth attempt's, which reaches both): cut is
	// moved once, to the attempts made by then, so that no attempt is
	// refused on one node and let through on the other.
	var cut atomic.Int32
	cut.Store(math.MaxInt32)
	// Node 0: the first release runs, its reply lost; later ones as is.
	hooks[0].arm(tok, func(_ int, _ bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if tries[0].Add(1) == 1 {
			_ = next(ctx, cmd)
			cmd.SetErr(errLostReply)
			return errLostReply
		}
		return next(ctx, cmd)
	})
	for i := 1; i <= 2; i++ {
		// Nodes 1 and 2: not reachable for the releases up to cut.
		hooks[i].arm(tok, func(_ int, _ bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if tries[i].Add(1) <= cut.Load() {
				cmd.SetErr(errRefused)
				return errRefused
			}
			return next(ctx, cmd)
		})
	}
	err = l.Unlock(ctx)
	t.Logf("Unlock: %v (tries per node %d %d %d)", err, tries[0].Load(), tries[1].Load(), tries[2].Load())
	if !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock confirmed on one node of three: %v, want ErrLost", err)
	}
	cut.Store(max(tries[1].Load(), tries[2].Load())) // nodes 1 and 2 reachable again
	err = eventually(ctx, 3*time.Second, func() error {
		for i := 1; i <= 2; i++ {
			if srvs[i].Client(t).Exists(ctx, "dlock:{rl}:mutex").Val() != 0 {
				return fmt.Errorf("node %d still holds the share after it came back (%d release attempts on it in all); README: released in the background", i, tries[i].Load())
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// proxiedRetryingRedlock is a Redlock client on n fresh masters, each
// behind a proxy, with go-redis' default MaxRetries (3), as users have it.
func proxiedRetryingRedlock(t *testing.T, n int) (*dlock.Client, []*redistest.Server, []*redistest.Proxy) {
	t.Helper()
	srvs := redistest.StartN(t, n)
	ps := make([]*redistest.Proxy, n)
	rdbs := make([]redis.UniversalClient, n)
	for i, s := range srvs {
		ps[i] = redistest.StartProxy(t, s.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: ps[i].Addr()})
		t.Cleanup(func() { rdb.Close() })
		rdbs[i] = rdb
	}
	c := dlock.NewRedlock(rdbs)
	t.Cleanup(func() { c.Close() })
	return c, srvs, ps
}

// TestRedlockLostReleaseReplyRetriedByGoRedis: a Redlock Unlock whose
// release ran on a node but whose reply was lost (connection broken) is
// must not be sent again by go-redis itself (default MaxRetries): that
// run finds the share gone and counted the node as not released, so
// Unlock said ErrLost and Lost() closed for a lease it released
// everywhere. Node releases go once, and Unlock's next attempt counts a
// node whose reply was lost and whose share is gone as released.
func TestRedlockLostReleaseReplyRetriedByGoRedis(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "1 master", 3: "3 masters, 2 replies lost"}[n], func(t *testing.T) {
			c, srvs, ps := proxiedRetryingRedlock(t, n)
			ctx := t.Context()
			warm := mustTake(t, ctx, c.Mutex("warm").TryLock) // loads the scripts
			if err := warm.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l := mustTake(t, ctx, c.Mutex("rr", dlock.WithTTL(20*time.Second)).TryLock)
			var drops []<-chan struct{}
			for i := range min(n, 2) {
				drops = append(drops, ps[i].DropReply(l.Token(), false, nil))
			}
			err := l.Unlock(ctx)
			for _, d := range drops {
				select {
				case <-d:
				default:
					t.Fatalf("no reply lost (unlock: %v)", err)
				}
			}
			lost := isClosed(l.Lost())
			if err := gone(ctx, srvs, "dlock:{rr}:mutex"); err != nil {
				t.Fatalf("not released everywhere: %v", err)
			}
			if err != nil || lost {
				t.Errorf("Unlock released on every master, replies lost and retried by go-redis: %v, Lost() closed %v; want nil, open", err, lost)
			}
		})
	}
}

// TestRedlockReleaseWaitingForConnectionsThenGoneIsLost: Unlock's release
// waits on every master for a connection from go-redis' pool (each pool's
// one connection is busy with a BLPOP) until Unlock's ctx ends, so it is
// sent nowhere; meanwhile the lease's shares were removed on two of the
// three masters. The next Unlock finds them gone there: a loss (ErrLost,
// Lost() closed), not "released by the attempt before", as for one Redis
// (TestReleaseWaitingForAConnectionThenGoneIsLost).
func TestRedlockReleaseWaitingForConnectionsThenGoneIsLost(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	rdbs := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		rdbs[i] = s.Client(t, func(o *redis.Options) { o.PoolSize = 1 })
	}
	c := dlock.NewRedlock(rdbs)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	l := mustTake(t, ctx, c.Mutex("pooled", dlock.WithTTL(20*time.Second)).TryLock)
	for _, s := range srvs[:2] {
		if err := s.Client(t).Del(ctx, "dlock:{pooled}:mutex").Err(); err != nil {
			t.Fatal(err)
		}
	}
	busy := make(chan error, len(rdbs))
	for _, rdb := range rdbs {
		go func() { busy <- rdb.BLPop(ctx, time.Second, "nothing-"+marker()).Err() }()
	}
	time.Sleep(100 * time.Millisecond) // the BLPOPs have the connections
	uctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := l.Unlock(uctx)
	cancel()
	if err == nil {
		t.Fatal("Unlock whose releases waited for connections: nil")
	}
	for range rdbs {
		if err := <-busy; !errors.Is(err, redis.Nil) {
			t.Fatalf("BLPOP holding a connection: %v", err)
		}
	}
	err = l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrLost) || !isClosed(l.Lost()) {
		t.Errorf("shares removed on a majority, the first release sent nowhere: Unlock %v, Lost() closed %v; want ErrLost, closed", err, isClosed(l.Lost()))
	}
}

// TestRedlockRefusedTryWithPausedNodeCostsOneNodeTimeout: a TryLock of a
// lock held on a majority, while one node is paused, costs one node
// timeout (TTL/20 = 1s here), as README promises ("a node that is down
// or paused costs one node timeout now and then"), not two: the try's
// give-back to the paused node (it never answered: it may hold a share)
// goes on without the caller.
func TestRedlockRefusedTryWithPausedNodeCostsOneNodeTimeout(t *testing.T) {
	c, srvs, _ := newRedlock(t, 3)
	ctx := t.Context()
	m := c.Mutex("paused-refused", dlock.WithTTL(20*time.Second))
	h := mustTake(t, ctx, m.TryLock)
	defer h.Unlock(ctx)
	srvs[2].Pause(t)
	defer srvs[2].Resume(t)
	start := time.Now()
	_, err := m.TryLock(ctx)
	took := time.Since(start)
	t.Logf("TryLock: %v after %v", err, took)
	if took > 1600*time.Millisecond {
		t.Errorf("a refused TryLock with one node paused took %v; one node timeout is 1s", took)
	}
}

// TestRedlockDuplicateMaster: the same client given twice would count
// one Redis as two masters (a lease "held on a majority" of 3 on 2
// servers, freed by the loss of the doubled one): NewRedlock refuses it
// with ErrInvalid, as it refuses a nil master.
func TestRedlockDuplicateMaster(t *testing.T) {
	srvs := redistest.StartN(t, 2)
	a, b := srvs[0].Client(t), srvs[1].Client(t)
	c := dlock.NewRedlock([]redis.UniversalClient{a, b, a})
	t.Cleanup(func() { c.Close() })
	if _, err := c.Mutex("dup").TryLock(t.Context()); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("TryLock on a Redlock client given one master twice: %v, want ErrInvalid", err)
	}
}

// TestRedlockWaiterBesideUnreachableShareDoesNotSpin: 3 masters; a lease
// holds nodes 0 and 1 (node 2 lost its share: a restart without
// persistence), then node 1 goes down. No one can take the lock until the
// lease's share on node 0 runs out. A waiter's try is refused by node 0,
// granted by node 2, and gets no answer from node 1 (down or resting).
// The lease may hold a majority with node 1, so the try's give-back on
// node 2 must not be announced: it would wake the waiter itself, which
// would try again at once, a busy loop for as long as the share lasts.
// README: a node that is down "costs one node timeout now and then, not
// one per try"; the give-back of a try that cannot win "would only wake
// waiters to try again at once".
func TestRedlockWaiterBesideUnreachableShareDoesNotSpin(t *testing.T) {
	c, srvs, cnt := newRedlock(t, 3)
	ctx := t.Context()
	m := c.Mutex("spin", dlock.WithTTL(5*time.Second))
	l := mustTake(t, ctx, m.Lock)
	defer l.Unlock(ctx)
	if err := srvs[2].Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	srvs[1].Kill(t)
	sent := cnt.Load()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := m.Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while another lease's share on node 0 lives: %v, want the deadline", err)
	}
	n := cnt.Load() - sent
	t.Logf("a waiter sent %d commands in 1s", n)
	if n > 60 {
		t.Errorf("a waiter beside a lease whose majority includes a node that is down sent %d commands in 1s (a busy loop), want a few", n)
	}
}

// armHook calls arm with a command's arguments once, after the first
// command whose arguments include mark was answered.
type armHook struct {
	mark string
	once sync.Once
	arm  func(args []any)
}

func (h *armHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *armHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *armHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if slices.ContainsFunc(cmd.Args(), func(a any) bool { s, _ := a.(string); return s == h.mark }) {
			h.once.Do(func() { h.arm(cmd.Args()) })
		}
		return err
	}
}

// TestRedlockRefusedTryReturnsByDeadline: README (Deadlines):
// "Every call returns by its ctx deadline (plus a few ms), whatever the
// go-redis client's options". A TryLock refused by a majority but
// granted by node 0, which is paused right after it answered, gives that
// share back synchronously under a context of its own (redlockMutex.try
// -> giveBack: context.WithoutCancel, one node timeout, TTL/20 = 1s
// here), not the caller's: it returns a node timeout after the caller's
// deadline.
func TestRedlockRefusedTryReturnsByDeadline(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	ctx := t.Context()
	rdbs := make([]redis.UniversalClient, 3)
	for i, s := range srvs {
		rdbs[i] = s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	}
	paused := make(chan struct{})
	rdbs[0].(*redis.Client).AddHook(&armHook{mark: "w-try", arm: func([]any) {
		srvs[0].Pause(t)
		close(paused)
	}})
	c := dlock.NewRedlock(rdbs)
	t.Cleanup(func() { c.Close() })
	mustUnlock(t, mustTake(t, ctx, c.Mutex("warm").TryLock)) // loads the scripts
	const name = "refused-deadline"
	h := mustTake(t, ctx, c.Mutex(name, dlock.WithTTL(20*time.Second)).TryLock)
	_ = h
	if err := srvs[0].Client(t).Del(ctx, "dlock:{"+name+"}:mutex").Err(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		<-paused
		srvs[0].Resume(t)
	}()
	tctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Mutex(name, dlock.WithTTL(20*time.Second), dlock.WithMetadata("w-try")).TryLock(tctx)
	took := time.Since(start)
	t.Logf("TryLock: %v after %v", err, took)
	if took > 400*time.Millisecond {
		t.Errorf("TryLock with a 150ms ctx returned after %v", took)
	}
}

// TestRedlockUnlockReleasesShareOfFailedTry: a try of Lock that gets
// no majority of answers (two of three masters cut off) returns an error
// from redlockMutex.try, and with it drops what the try may have left:
// here node 0 ran the try (its share is there) but its reply was lost.
// The waiter tries again, and takes the lock on nodes 1 and 2 while node
// 0 rests (it failed twice, so it rests longer than they do). The lease
// does not know of node 0's share: its renewals keep that share alive
// (same token), and Unlock does not release it, so it outlives the
// lease by a whole TTL. README: "Unlock releases on every node that may
// hold a share (including nodes whose try reply was lost)".
func TestRedlockUnlockReleasesShareOfFailedTry(t *testing.T) {
	c, srvs, ps := newProxiedRedlock(t, 3)
	ctx := t.Context()
	const name = "failed-try"
	key := "dlock:{" + name + "}:mutex"
	mustUnlock(t, mustTake(t, ctx, c.Mutex("warm").TryLock)) // loads the scripts
	// Node 0 fails once: it rests 50ms, and 100ms after its next failure.
	ps[0].Cut(true)
	_, _ = c.Mutex(name).Status(ctx)
	ps[0].Cut(false)
	time.Sleep(100 * time.Millisecond)

	ps[1].Cut(true)
	ps[2].Cut(true)
	dropped := ps[0].DropReply("w-lock", false, func() { ps[0].Cut(true) })
	type res struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan res, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := c.Mutex(name, dlock.WithTTL(10*time.Second), dlock.WithMetadata("w-lock")).Lock(lctx)
		got <- res{l, err}
	}()
	<-dropped
	time.Sleep(20 * time.Millisecond)
	ps[1].Cut(false)
	ps[2].Cut(false)
	w := <-got
	if w.err != nil {
		t.Fatal(w.err)
	}
	v := srvs[0].Client(t).Get(ctx, key).Val()
	if !strings.HasPrefix(v, w.l.Token()+" ") {
		t.Skipf("node 0 holds no share of the lease (%q): the test tests nothing", v)
	}
	ps[0].Cut(false)
	if err := w.l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := eventually(ctx, 3*time.Second, func() error { return gone(ctx, srvs, key) }); err != nil {
		t.Errorf("after Unlock returned nil: %v (TTL %v left)", err, srvs[0].Client(t).PTTL(ctx, key).Val())
	}
}

// TestRedlockLateGiveBackLeavesLaterTrysShare: the tries of one Lock
// share one token. A try refused overall but granted on node 2 gives
// that share back; the give-back's request is held back in the network
// (a lost segment sent again) past its node timeout, so the try counts
// node 2 as possibly holding a share and the waiter goes on. Its next
// try takes the lock on nodes 1 and 2 (node 0 is cut off from it: a
// minority). Then the old give-back reaches node 2: it must leave the
// share the later try took up. Were it to delete it (the token is the
// same), the lease would hold one node of three with Lost() open, and
// another client would take the lock on nodes 0 and 2: two holders,
// while every Redis kept its data.
func TestRedlockLateGiveBackLeavesLaterTrysShare(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	ctx := t.Context()
	const name = "stale-giveback"
	// H: holds nodes 0 and 1 (node 2 was cut off from it while it took
	// the lock).
	hps := make([]*redistest.Proxy, 3)
	hrdbs := make([]redis.UniversalClient, 3)
	// W: the waiter, every node behind a proxy.
	wps := make([]*redistest.Proxy, 3)
	wrdbs := make([]redis.UniversalClient, 3)
	direct := make([]redis.UniversalClient, 3)
	for i, s := range srvs {
		hps[i] = redistest.StartProxy(t, s.Addr())
		wps[i] = redistest.StartProxy(t, s.Addr())
		hrdbs[i] = redis.NewClient(&redis.Options{Addr: hps[i].Addr(), MaxRetries: -1})
		wrdbs[i] = redis.NewClient(&redis.Options{Addr: wps[i].Addr(), MaxRetries: -1})
		direct[i] = s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		t.Cleanup(func() { hrdbs[i].Close(); wrdbs[i].Close() })
	}
	var delivered <-chan struct{}
	armed := make(chan struct{})
	wrdbs[2].(*redis.Client).AddHook(&armHook{mark: "w-waiter", arm: func(args []any) {
		tok, _ := args[5].(string) // EVALSHA sha 2 key fence-key tok ...
		t.Logf("armed after W's first try on node 2 at %v", time.Now().Format("05.000000"))
		delivered = wps[2].DelayRequest(tok, 1500*time.Millisecond)
		close(armed)
	}})
	hc, wc, bc := dlock.NewRedlock(hrdbs), dlock.NewRedlock(wrdbs), dlock.NewRedlock(direct)
	t.Cleanup(func() { hc.Close(); wc.Close(); bc.Close() })
	// Load the scripts everywhere.
	mustUnlock(t, mustTake(t, ctx, wc.Mutex("warm").TryLock))

	hps[2].Cut(true)
	h := mustTake(t, ctx, hc.Mutex(name, dlock.WithTTL(20*time.Second)).TryLock)
	hps[2].Cut(false)
	{
		key := "dlock:{" + name + "}:mutex"
		t.Logf("H took it: node 0 %q, node 1 %q, node 2 %q", direct[0].Get(ctx, key).Val(), direct[1].Get(ctx, key).Val(), direct[2].Get(ctx, key).Val())
	}
	wps[0].Cut(true) // W cannot reach node 0: a minority

	const ttl = 2 * time.Second // node timeout 100ms
	type res struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan res, 1)
	go func() {
		l, err := wc.Mutex(name, dlock.WithTTL(ttl), dlock.WithMetadata("w-waiter")).Lock(ctx)
		got <- res{l, err}
	}()
	<-armed
	time.Sleep(300 * time.Millisecond)
	t.Logf("before H's Unlock at %v: node 2 %q", time.Now().Format("05.000000"), direct[2].Get(ctx, "dlock:{"+name+"}:mutex").Val())
	unlocked := time.Now()
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var w res
	select {
	case w = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("W did not get the lock")
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	t.Logf("W got the lock %v after H's Unlock began", time.Since(unlocked))
	key := "dlock:{" + name + "}:mutex"
	t.Logf("W's lease (fence %d); node 2's owner key before the old give-back lands: %q", w.l.Fence(), direct[2].Get(ctx, key).Val())
	<-delivered
	time.Sleep(50 * time.Millisecond)
	t.Logf("after: node 1 %q, node 2 %q", direct[1].Get(ctx, key).Val(), direct[2].Get(ctx, key).Val())
	b, err := bc.Mutex(name, dlock.WithTTL(ttl)).TryLock(ctx)
	lost := isClosed(w.l.Lost())
	if err == nil {
		t.Errorf("B took the lock (fence %d) while W's lease (fence %d) has Lost() closed=%v: two holders", b.Fence(), w.l.Fence(), lost)
		_ = b.Unlock(ctx)
	} else {
		t.Logf("B: %v", err)
	}
}
