package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
)

func TestMutexTryLockUnlock(t *testing.T) {
	c, ctx := start(t)
	m := c.Mutex("job")

	a := mustTake(t, ctx, m.TryLock)
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second TryLock: %v, want ErrNotAcquired", err)
	}
	if held, err := a.Held(ctx); err != nil || !held {
		t.Fatalf("Held = %v, %v; want true", held, err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("second Unlock: %v, want ErrInvalid", err)
	}
	if held, err := a.Held(ctx); err != nil || held {
		t.Fatalf("Held after Unlock = %v, %v; want false", held, err)
	}
	b := mustTake(t, ctx, m.TryLock)
	defer b.Unlock(ctx)
	if b.Fence() <= a.Fence() {
		t.Errorf("fence %d after %d", b.Fence(), a.Fence())
	}
	if a.Token() == b.Token() || len(a.Token()) != 32 {
		t.Errorf("tokens %q and %q: want distinct 128-bit hex", a.Token(), b.Token())
	}
	if a.Name() != "job" {
		t.Errorf("Name = %q", a.Name())
	}
}

func TestMutexNamesAnyBytes(t *testing.T) {
	c, ctx := start(t)
	names := []string{"{tag}", "a}b{", "sp ace", "nul\x00byte", "ünï ✓", strings.Repeat("n", keys.MaxName)}
	var leases []*dlock.Lease
	for _, name := range names {
		l, err := c.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", name, err)
		}
		leases = append(leases, l)
	}
	// Distinct names are distinct locks, and each is held.
	for _, name := range names {
		if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock(%q) again: %v, want ErrNotAcquired", name, err)
		}
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

func TestBadInput(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	cases := map[string]*dlock.Mutex{
		"empty name":       c.Mutex(""),
		"over-long name":   c.Mutex(strings.Repeat("x", keys.MaxName+1)),
		"zero TTL":         c.Mutex("a", dlock.WithTTL(0)),
		"sub-ms TTL":       c.Mutex("a", dlock.WithTTL(500*time.Microsecond)),
		"negative stall":   c.Mutex("a", dlock.WithStallTimeout(-time.Second)),
		"huge metadata":    c.Mutex("a", dlock.WithMetadata(strings.Repeat("m", dlock.MaxMetadata+1))),
		"bad prefix":       dlock.New(rdb, dlock.WithPrefix("a{b")).Mutex("a"),
		"empty prefix":     dlock.New(rdb, dlock.WithPrefix("")).Mutex("a"),
		"nil redis client": dlock.New(nil).Mutex("a"),
		"unknown RW mode":  c.Mutex("a", dlock.WithRWMode(dlock.RWMode(7))),
	}
	for name, m := range cases {
		if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: TryLock: %v, want ErrInvalid", name, err)
		}
		if _, err := m.Lock(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: Lock: %v, want ErrInvalid", name, err)
		}
		if _, err := m.Status(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: Status: %v, want ErrInvalid", name, err)
		}
	}
	l := mustTake(t, ctx, c.Mutex("ok").TryLock)
	if err := l.Refresh(ctx, 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Refresh(0): %v, want ErrInvalid", err)
	}
	l.Unlock(ctx)
}

func TestMutexStatus(t *testing.T) {
	c, ctx := start(t)
	m := c.Mutex("report", dlock.WithTTL(time.Minute), dlock.WithMetadata("host-a:42"))
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Held || st.Fence != 0 || st.Kind != "mutex" || st.Name != "report" {
		t.Fatalf("status of a new mutex: %+v", st)
	}
	before := time.Now().Add(-time.Second)
	l := mustTake(t, ctx, m.Lock)
	st, err = m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Metadata != "host-a:42" || st.Fence != l.Fence() ||
		st.TTL <= 50*time.Second || st.TTL > time.Minute || st.Since.Before(before) || st.Since.After(time.Now().Add(time.Second)) {
		t.Fatalf("status while held: %+v (fence %d)", st, l.Fence())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Held || st.Fence != l.Fence() || st.TTL != 0 || st.Metadata != "" {
		t.Fatalf("status after unlock: %+v, want free with last fence %d", st, l.Fence())
	}
}

// TestFenceSurvivesExpiry checks fences rise even when every key of the
// lock is gone, and that no key outlives its use.
func TestFenceSurvivesExpiry(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	m := c.Mutex("fenced")
	var last uint64
	for i := range 20 {
		l := mustTake(t, ctx, m.TryLock)
		if l.Fence() <= last {
			t.Fatalf("round %d: fence %d not above %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			rdb.FlushAll(ctx) // as if every key had expired
		}
	}
	// With the lock free, no key of it may live forever.
	ks, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 || ttl > 2*time.Minute {
			t.Errorf("key %q has TTL %v; want a bounded one", k, ttl)
		}
	}
}

// TestFenceAheadOfTheClock checks the fence after a last fence the clock
// has not reached (a clock stepped back) and after one far behind it: the
// script tells them apart by comparing decimal strings.
func TestFenceAheadOfTheClock(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	m := c.Mutex("stepped")
	l := mustTake(t, ctx, m.TryLock)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ks, err := rdb.Keys(ctx, "*:fence").Result()
	if err != nil || len(ks) != 1 {
		t.Fatalf("fence keys %v, %v; want one", ks, err)
	}
	take := func() uint64 {
		t.Helper()
		l := mustTake(t, ctx, m.TryLock)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		return l.Fence()
	}
	ahead := l.Fence() + uint64(time.Hour/time.Microsecond)
	rdb.Set(ctx, ks[0], ahead, 0)
	if f := take(); f != ahead+1 {
		t.Fatalf("fence %d after a last fence of %d ahead of the clock; want %d", f, ahead, ahead+1)
	}
	if f := take(); f != ahead+2 {
		t.Fatalf("next fence %d; want %d", f, ahead+2)
	}
	rdb.Set(ctx, ks[0], 5, 0) // far behind, and shorter
	if f := take(); f <= l.Fence() || f > ahead {
		t.Fatalf("fence %d after a last fence of 5; want the clock, above %d", f, l.Fence())
	}
}

// TestFenceIsTheServerClock takes each kind of lock that Redis' clock
// fences, and checks that every fence lies between TIME read before and
// after the take: the scripts write the clock as a string from TIME's
// seconds and its microseconds padded to six digits, and a wrong pad
// would show in the one take in ten whose microseconds have fewer digits.
func TestFenceIsTheServerClock(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	sem := c.Semaphore("clock-sem", 2)
	rw := c.RWMutex("clock-rw")
	kinds := map[string]func(context.Context) (*dlock.Lease, error){
		"Mutex":     c.Mutex("clock-mutex").TryLock,
		"FairMutex": c.FairMutex("clock-fair").TryLock,
		"RWMutex":   rw.TryLock,
		"read":      rw.TryRLock,
		"Semaphore": func(ctx context.Context) (*dlock.Lease, error) { return sem.TryAcquire(ctx, 1) },
	}
	for name, take := range kinds {
		for range 200 {
			before, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			l := mustTake(t, ctx, take)
			after, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if f := int64(l.Fence()); f < before.UnixMicro() || f > after.UnixMicro() {
				t.Fatalf("%s: fence %d, not between the server's clock before (%d) and after (%d)",
					name, f, before.UnixMicro(), after.UnixMicro())
			}
		}
	}
}

func TestRoundTrips(t *testing.T) {
	srv, ctx := serve(t)
	c, _, cnt := newClient(t, srv)
	m := c.Mutex("rt")
	// Warm up: the first run of each script pays a NOSCRIPT fallback.
	l := mustTake(t, ctx, m.TryLock)
	l.Unlock(ctx)

	before := cnt.Load()
	l = mustTake(t, ctx, m.TryLock)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := cnt.Load() - before; n != 2 {
		t.Fatalf("TryLock+Unlock sent %d commands, want 2", n)
	}
}

// TestWaiterDoesNotPoll holds a lock for a long time and counts the
// commands a blocked waiter sends: a poller would send dozens.
func TestWaiterDoesNotPoll(t *testing.T) {
	srv, ctx := serve(t)
	holderC, _, _ := newClient(t, srv)
	waiterC, _, cnt := newClient(t, srv)
	h := mustTake(t, ctx, holderC.Mutex("busy", dlock.WithTTL(time.Minute)).Lock)
	got := takeAndRelease(ctx, waiterC.Mutex("busy").Lock)
	time.Sleep(1500 * time.Millisecond)
	// Its try, then a heartbeat a second, the first of which loads its
	// script (EVALSHA refused, then EVAL).
	if n := cnt.Load(); n > 4 {
		t.Errorf("waiter sent %d commands in 1.5s while the lock was held: %s", n, cnt)
	}
	// Five releases and re-takes by the holder: each may wake the waiter once.
	for range 5 {
		h.Unlock(ctx)
		h = mustTake(t, ctx, holderC.Mutex("busy", dlock.WithTTL(time.Minute)).Lock)
		select {
		case err := <-got:
			// The waiter won a race for the released lock: fine, and done.
			h.Unlock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	if n := cnt.Load(); n > 3+5*2 {
		t.Errorf("waiter sent %d commands over 5 releases: %s", n, cnt)
	}
	h.Unlock(ctx)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestReleaseWakesWaiter: a waiter behind a 30s lease gets the lock when
// it is released, not when the lease would have run out.
func TestReleaseWakesWaiter(t *testing.T) {
	c, ctx := start(t)
	m := c.Mutex("wake", dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, m.Lock)
	handOff(t, ctx, h, m.Lock, 200*time.Millisecond)
}

// TestWaiterSurvivesSubscriptionLoss kills the shared subscription
// connection while a waiter waits; the release after it must still wake
// the waiter long before the holder's 30s lease would run out.
func TestWaiterSurvivesSubscriptionLoss(t *testing.T) {
	srv, ctx := serve(t)
	holderC, admin, _ := newClient(t, srv)
	waiterC, _, _ := newClient(t, srv)
	h := mustTake(t, ctx, holderC.Mutex("resub", dlock.WithTTL(30*time.Second)).Lock)
	got := takeAndRelease(ctx, waiterC.Mutex("resub").Lock)
	time.Sleep(300 * time.Millisecond)
	if n, err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 connection killed", n, err)
	}
	time.Sleep(500 * time.Millisecond) // let the hub reconnect
	h.Unlock(ctx)
	within(t, got, 10*time.Second, "waiter not woken after the subscription was re-established")
}

// TestCrashedHolder: a holder that stops renewing and never unlocks; the
// waiter gets the lock when the TTL runs out, with no release announced.
// With a TTL longer than two heartbeats, the waiter leaves its wake-up to
// the heartbeat's replies until it is near, then to a timer: it still
// wakes when the TTL runs out, not at the next heartbeat after it (which
// comes half a second later: the heartbeats start with the waiter).
func TestCrashedHolder(t *testing.T) {
	for _, ttl := range []time.Duration{700 * time.Millisecond, 3500 * time.Millisecond} {
		t.Run(ttl.String(), func(t *testing.T) { crashedHolder(t, ttl) })
	}
}

func crashedHolder(t *testing.T, ttl time.Duration) {
	c, ctx := start(t)
	crashed, err := c.Mutex("crash", dlock.WithTTL(ttl), dlock.WithAutoRefresh(false)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l := mustTake(t, ctx, c.Mutex("crash").Lock)
	waited := time.Since(start)
	defer l.Unlock(ctx)
	if waited < ttl-100*time.Millisecond || waited > ttl+400*time.Millisecond {
		t.Errorf("waiter got the lock after %v; the crashed holder's TTL was %v", waited, ttl)
	}
	if l.Fence() <= crashed.Fence() {
		t.Errorf("fence %d not above the crashed holder's %d", l.Fence(), crashed.Fence())
	}
	select {
	case <-crashed.Lost():
	case <-time.After(time.Second):
		t.Error("the expired lease's Lost() did not close")
	}
	if err := crashed.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock of the expired lease: %v, want ErrLost", err)
	}
}

func TestStallTimeout(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	const stall = 300 * time.Millisecond

	t.Run("stuck holder", func(t *testing.T) {
		if _, err := c.Mutex("stuck", dlock.WithTTL(time.Minute)).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		givesUpOnStall(t, "Lock", stall, func() error {
			_, err := c.Mutex("stuck", dlock.WithStallTimeout(stall)).Lock(ctx)
			return err
		})
	})

	t.Run("changing holders", func(t *testing.T) {
		// Hand the lock from holder to holder every 100ms without ever
		// freeing it, as a busy lock does; the waiter must keep waiting.
		key := keys.For(dlock.DefaultPrefix, keys.KindMutex, "busy").Key()
		if _, err := c.Mutex("busy", dlock.WithTTL(time.Minute)).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		churned := make(chan error, 1)
		go func() {
			for i := 1; ; i++ {
				select {
				case <-stop:
					churned <- nil
					return
				case <-time.After(100 * time.Millisecond):
				}
				holder := fmt.Sprintf("other %d 0  ", 1000+i) // lua/lib/owner.lua
				if err := rdb.SetArgs(context.Background(), key, holder, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
					churned <- err
					return
				}
			}
		}()
		wctx, cancel := context.WithTimeout(ctx, 5*stall)
		defer cancel()
		_, err := c.Mutex("busy", dlock.WithStallTimeout(stall)).Lock(wctx)
		close(stop)
		if cerr := <-churned; cerr != nil {
			t.Fatal(cerr)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock = %v; want to wait until the deadline while holders change", err)
		}
	})
}

func TestLockContextErrors(t *testing.T) {
	c, ctx := start(t)
	if _, err := c.Mutex("ctx", dlock.WithTTL(time.Minute)).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := c.Mutex("ctx").Lock(cctx)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock = %v; want ErrNotAcquired and context.Canceled", err)
	}
}

func TestClosedClient(t *testing.T) {
	c, ctx := start(t)
	if _, err := c.Mutex("closed", dlock.WithTTL(time.Minute)).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.Mutex("closed").Lock(ctx)
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("Lock on a closing client = %v, want ErrInvalid", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock still blocked after Close")
	}
}

func TestNoExpiry(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	m := c.Mutex("forever", dlock.WithNoExpiry())
	l := mustTake(t, ctx, m.Lock)
	st, err := m.Status(ctx)
	if err != nil || st.TTL != -1 {
		t.Fatalf("Status = %+v, %v; want TTL -1", st, err)
	}
	key := keys.For(dlock.DefaultPrefix, keys.KindMutex, "forever").Key()
	if ttl := rdb.PTTL(ctx, key).Val(); ttl != -1 {
		t.Fatalf("PTTL = %v, want -1 (no expiry)", ttl)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("key left after Unlock")
	}
	_ = redis.Nil
}

// A retried acquire script must recognise its own token, or TryLock would
// report ErrNotAcquired while an orphan lease of its own holds the mutex.
func TestTryLockSentTwiceFindsItsOwnLease(t *testing.T) {
	srv := redistest.Start(t)
	h := &hook{match: isTry, act: sentTwice(false)}
	c, _ := hooked(t, srv, h)
	ctx := t.Context()
	m := c.Mutex("m", dlock.WithTTL(2*time.Second))
	warm, err := m.TryLock(ctx) // load the script (EVALSHA would NOSCRIPT)
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(ctx)
	h.armed.Store(true)
	_, err = m.TryLock(ctx)
	st, _ := m.Status(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) && st.Held {
		t.Errorf("TryLock = %v, but the mutex is held by our own orphan token (fence %d, TTL %v)", err, st.Fence, st.TTL)
	}
}

// Same, inside Lock's wait loop with WithNoExpiry, where the waiter would
// otherwise wait for itself forever.
func TestLockSentTwiceWhileWaitingFindsItsOwnLease(t *testing.T) {
	srv := redistest.Start(t)
	c1, _, _ := newClient(t, srv)
	h := &hook{match: isTry, act: sentTwice(true)}
	c2, _ := hooked(t, srv, h)
	ctx := t.Context()
	first := mustTake(t, ctx, c1.Mutex("m", dlock.WithNoExpiry()).TryLock)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	done := takeAndRelease(cctx, c2.Mutex("m", dlock.WithNoExpiry()).Lock)
	time.Sleep(300 * time.Millisecond)
	h.armed.Store(true)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Lock never acquired a free-then-self-held mutex: %v", err)
	}
}

// A waiter that consumed the wake-up, hit a transient error, and then saw
// its ctx end must hand the wake-up on, or the other local waiter would
// sleep although the mutex is free (forever, with WithNoExpiry).
func TestWaiterThatGivesUpPassesItsWakeUpOn(t *testing.T) {
	srv := redistest.Start(t)
	c1, _, _ := newClient(t, srv)
	h := &hook{}
	c2, _ := hooked(t, srv, h)
	ctx := t.Context()
	holder := mustTake(t, ctx, c1.Mutex("m", dlock.WithNoExpiry()).TryLock)
	ctx1, cancel1 := context.WithCancel(ctx)
	h.act = broken(func() { go func() { time.Sleep(3 * time.Millisecond); cancel1() }() })
	m := c2.Mutex("m", dlock.WithNoExpiry())
	go func() { m.Lock(ctx1) }() // W1, oldest
	time.Sleep(200 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	res := takeAndRelease(cctx, m.Lock) // W2
	time.Sleep(200 * time.Millisecond)
	h.armed.Store(true)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Errorf("second waiter never woke for a free mutex: %v", err)
	}
}

// TestForeignOwnerValue: a lock's key holding a value dlock did not write
// (another program's, or a newer format) reads as held by someone else:
// a try is refused with ErrNotAcquired and leaves the value alone, and
// Status shows it held, with fence 0.
func TestForeignOwnerValue(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	rw := c.RWMutex("foreign")
	for _, l := range []struct {
		kind, call string
		try        func(context.Context) (*dlock.Lease, error)
		status     func(context.Context) (dlock.Status, error)
	}{
		{keys.KindMutex, "TryLock", c.Mutex("foreign").TryLock, c.Mutex("foreign").Status},
		{keys.KindFair, "TryLock", c.FairMutex("foreign").TryLock, c.FairMutex("foreign").Status},
		{keys.KindRW, "TryLock", rw.TryLock, rw.Status},
		{keys.KindRW, "TryRLock", rw.TryRLock, rw.Status},
	} {
		key := keys.For(dlock.DefaultPrefix, l.kind, "foreign").Key()
		if err := rdb.Set(ctx, key, "not-dlock's", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.try(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: %s on a foreign value: %v, want ErrNotAcquired", l.kind, l.call, err)
		}
		if v := rdb.Get(ctx, key).Val(); v != "not-dlock's" {
			t.Errorf("%s: the value is now %q", l.kind, v)
		}
		if st, err := l.status(ctx); err != nil || !st.Held || st.Fence != 0 {
			t.Errorf("%s: Status on a foreign value: %+v, %v; want held, fence 0", l.kind, st, err)
		}
	}
}
