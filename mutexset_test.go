package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
)

// setUse records who was inside which member's critical section.
type setUse struct {
	mu      sync.Mutex
	fences  map[string][]uint64 // per member, in acquisition order
	inside  atomic.Int32
	maxSeen atomic.Int32
}

func newSetUse() *setUse { return &setUse{fences: map[string][]uint64{}} }

// contendSet acquires a member repeatedly until ctx ends. Each member's
// critical section is guarded by its own O_EXCL marker in dir.
func contendSet(ctx context.Context, acquire func(context.Context) (*dlock.Lease, error), dir string, hold time.Duration, u *setUse) (int, error) {
	n := 0
	for ctx.Err() == nil {
		lease, err := acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, err
		}
		marker := filepath.Join(dir, lease.Name())
		err = critical(marker, hold, func() {
			in := u.inside.Add(1)
			for {
				m := u.maxSeen.Load()
				if in <= m || u.maxSeen.CompareAndSwap(m, in) {
					break
				}
			}
			u.mu.Lock()
			u.fences[lease.Name()] = append(u.fences[lease.Name()], lease.Fence())
			u.mu.Unlock()
		})
		u.inside.Add(-1)
		uerr := lease.Unlock(context.WithoutCancel(ctx))
		if err != nil {
			return n, fmt.Errorf("member %s: %w", lease.Name(), err)
		}
		if uerr != nil {
			return n, fmt.Errorf("unlock %s: %w", lease.Name(), uerr)
		}
		n++
	}
	return n, nil
}

// contendSetAll runs contendSet in n goroutines for d, the i-th taking
// members with acquire(i), each member's holders counted with markers in
// a directory of its own, fails t on any error, and returns the use.
func contendSetAll(t *testing.T, ctx context.Context, d time.Duration, n int, acquire func(i int) func(context.Context) (*dlock.Lease, error)) *setUse {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	u := newSetUse()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		take := acquire(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = contendSet(ctx, take, dir, time.Millisecond, u)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return u
}

// checkSetUse checks that every member was used, no more holders than
// members were inside at once, and fences rose per member.
func checkSetUse(t *testing.T, u *setUse, members []string) {
	t.Helper()
	if m := int(u.maxSeen.Load()); m > len(members) {
		t.Errorf("%d holders at once in a set of %d", m, len(members))
	}
	total := 0
	for _, m := range members {
		f := u.fences[m]
		total += len(f)
		if len(f) == 0 {
			t.Errorf("member %q never acquired", m)
		}
		for i := 1; i < len(f); i++ {
			if f[i] <= f[i-1] {
				t.Errorf("member %q: fence %d at acquisition %d is not above %d", m, f[i], i, f[i-1])
				break
			}
		}
	}
	t.Logf("%d acquisitions, at most %d holders at once", total, u.maxSeen.Load())
}

func TestSetExclusion(t *testing.T) {
	srv, ctx := serve(t)
	members := []string{"dev-a", "dev-b", "dev-c"}
	admin, _, _ := newClient(t, srv)
	if err := admin.MutexSet("devices").Add(ctx, members...); err != nil {
		t.Fatal(err)
	}
	u := contendSetAll(t, ctx, 3*time.Second, 12, func(i int) func(context.Context) (*dlock.Lease, error) {
		// Clients of their own, as separate machines, and goroutines
		// sharing one; a quarter of them want one member by name.
		c := admin
		if i%2 == 1 {
			c, _, _ = newClient(t, srv)
		}
		s := c.MutexSet("devices", dlock.WithTTL(5*time.Second))
		if i%4 == 3 {
			member := members[i%3]
			return func(ctx context.Context) (*dlock.Lease, error) { return s.AcquireMember(ctx, member) }
		}
		return s.Acquire
	})
	checkSetUse(t, u, members)
	if u.maxSeen.Load() < 2 {
		t.Errorf("never more than %d holder at once: the members were not used in parallel", u.maxSeen.Load())
	}
}

func mustAcquireMember(t *testing.T, s *dlock.MutexSet, member string) *dlock.Lease {
	t.Helper()
	l, err := s.TryAcquireMember(t.Context(), member)
	if err != nil {
		t.Fatalf("TryAcquireMember(%q): %v", member, err)
	}
	return l
}

func mustUnlock(t *testing.T, leases ...*dlock.Lease) {
	t.Helper()
	for _, l := range leases {
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatalf("Unlock(%q): %v", l.Name(), err)
		}
	}
}

// takeAll acquires any member len(want) times and checks the order.
func takeAll(t *testing.T, s *dlock.MutexSet, want ...string) []*dlock.Lease {
	t.Helper()
	var got []string
	var leases []*dlock.Lease
	for range want {
		l, err := s.TryAcquire(t.Context())
		if err != nil {
			t.Fatalf("TryAcquire after %v: %v", got, err)
		}
		got = append(got, l.Name())
		leases = append(leases, l)
	}
	if !slices.Equal(got, want) {
		t.Errorf("TryAcquire took %v, want %v", got, want)
	}
	return leases
}

func TestSetLRU(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("lru", dlock.WithTTL(time.Minute))
	if err := s.Add(ctx, "d", "c", "b", "a"); err != nil {
		t.Fatal(err)
	}
	la, lb, lc := mustAcquireMember(t, s, "a"), mustAcquireMember(t, s, "b"), mustAcquireMember(t, s, "c")
	mustUnlock(t, lc, la, lb)
	// d was never used; then c, a, b in the order they were released.
	leases := takeAll(t, s, "d", "c", "a", "b")
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a full set: %v, want ErrNotAcquired", err)
	}
	// Release in the order b, d, a, c; members added now come first, in
	// name order.
	mustUnlock(t, leases[3], leases[0], leases[2], leases[1])
	if err := s.Add(ctx, "f", "e", "a"); err != nil {
		t.Fatal(err)
	}
	leases = takeAll(t, s, "e", "f", "b", "d", "a", "c")
	mustUnlock(t, leases...)
}

func TestSetAddKeepsHeld(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("keep", dlock.WithTTL(time.Minute))
	if err := s.Add(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	l := mustAcquireMember(t, s, "a")
	if err := s.Add(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if held, err := l.Held(ctx); err != nil || !held {
		t.Fatalf("Held after Add = %v, %v; want true", held, err)
	}
	if _, err := s.TryAcquireMember(ctx, "a"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireMember(a) after Add: %v, want ErrNotAcquired", err)
	}
	ms, err := s.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || !ms[0].Held || ms[0].Fence != l.Fence() || ms[1].Held {
		t.Fatalf("Members = %+v; want a held with fence %d, b free", ms, l.Fence())
	}
	if err := l.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	mustUnlock(t, l)
}

func TestSetNoMember(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("known", dlock.WithTTL(time.Minute))
	if _, err := s.TryAcquireMember(ctx, "ghost"); !errors.Is(err, dlock.ErrNoMember) {
		t.Fatalf("TryAcquireMember on an empty set: %v, want ErrNoMember", err)
	}
	if err := s.Add(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.AcquireMember(wctx, "ghost")
	if !errors.Is(err, dlock.ErrNoMember) || errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("AcquireMember(ghost): %v, want ErrNoMember alone", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("AcquireMember(ghost) took %v to fail; want at once", d)
	}

	// A waiter for a member that is removed while held fails with
	// ErrNoMember as soon as the holder releases it.
	h := mustAcquireMember(t, s, "x")
	got := make(chan error, 1)
	go func() {
		l, err := c.MutexSet("known").AcquireMember(wctx, "x")
		if err == nil {
			l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := s.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	mustUnlock(t, h)
	select {
	case err := <-got:
		if !errors.Is(err, dlock.ErrNoMember) {
			t.Fatalf("waiter for a removed member: %v, want ErrNoMember", err)
		}
		if d := time.Since(released); d > time.Second {
			t.Errorf("waiter told %v after the release", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter for a removed member still waiting")
	}
}

// TestSetEmpty: an empty set has nothing free; TryAcquire says
// ErrNotAcquired (not ErrNoMember: no member was named), and Acquire waits
// for an Add, woken by it.
func TestSetEmpty(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("empty")
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrNoMember) {
		t.Fatalf("TryAcquire on an empty set: %v, want ErrNotAcquired", err)
	}
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Members != 0 || st.Free != 0 || st.Held || st.Kind != "set" || st.Name != "empty" {
		t.Errorf("Status of an empty set: %+v", st)
	}
	if ms, err := s.Members(ctx); err != nil || len(ms) != 0 {
		t.Errorf("Members of an empty set = %v, %v", ms, err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := s.Acquire(wctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond)
	added := time.Now()
	if err := s.Add(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	// Nothing expires in an empty set: only the Add can wake the waiter.
	select {
	case l := <-got:
		if l == nil {
			return
		}
		if d := time.Since(added); d > time.Second {
			t.Errorf("waiter got a member %v after the Add", d)
		}
		if l.Name() != "late" {
			t.Errorf("got %q, want late", l.Name())
		}
		mustUnlock(t, l)
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire not woken by Add")
	}

	// Adds of a few members and of many wake as many waiters.
	for _, n := range []int{2, 40} {
		bulk := c.MutexSet(fmt.Sprint("bulk-", n))
		const waiters = 3
		got := make(chan *dlock.Lease, waiters)
		for range waiters {
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				l, err := bulk.Acquire(wctx)
				if err != nil {
					t.Errorf("Add of %d: waiter: %v", n, err)
				}
				got <- l
			}()
		}
		time.Sleep(300 * time.Millisecond)
		var names []string
		for i := range n {
			names = append(names, fmt.Sprint("m", i))
		}
		added := time.Now()
		if err := bulk.Add(ctx, names...); err != nil {
			t.Fatal(err)
		}
		// Then each release lets one more waiter in.
		for range waiters {
			l := <-got
			if l == nil {
				continue
			}
			if d := time.Since(added); d > time.Second {
				t.Errorf("Add of %d: a waiter got %s %v after the Add", n, l.Name(), d)
			}
			mustUnlock(t, l)
		}
	}
}

// TestSetReleaseWakes: waiters behind 30s leases get a member within
// milliseconds of its release. A waiter for a named member and a waiter
// for any member share a client; the release of the member the first does
// not want must still reach the second.
func TestSetReleaseWakes(t *testing.T) {
	srv, ctx := serve(t)
	holderC, _, _ := newClient(t, srv)
	waiterC, _, _ := newClient(t, srv)
	hs := holderC.MutexSet("wake", dlock.WithTTL(30*time.Second))
	if err := hs.Add(ctx, "x", "y"); err != nil {
		t.Fatal(err)
	}
	hx, hy := mustAcquireMember(t, hs, "x"), mustAcquireMember(t, hs, "y")
	ws := waiterC.MutexSet("wake")
	type result struct {
		l  *dlock.Lease
		at time.Time
	}
	wait := func(acquire func(context.Context) (*dlock.Lease, error)) chan result {
		ch := make(chan result, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			l, err := acquire(wctx)
			if err != nil {
				t.Error(err)
			}
			ch <- result{l, time.Now()}
		}()
		return ch
	}
	forX := wait(func(ctx context.Context) (*dlock.Lease, error) { return ws.AcquireMember(ctx, "x") })
	time.Sleep(200 * time.Millisecond) // the named waiter is the older one
	forAny := wait(ws.Acquire)
	time.Sleep(200 * time.Millisecond)

	check := func(name string, ch chan result, released time.Time, want string) {
		t.Helper()
		select {
		case r := <-ch:
			if r.l == nil {
				t.FailNow()
			}
			d := r.at.Sub(released)
			t.Logf("%s waiter got %s %v after the release", name, r.l.Name(), d.Round(time.Microsecond))
			if d > time.Second {
				t.Errorf("%s waiter woke %v after the release; the lease had 30s left", name, d)
			}
			if r.l.Name() != want {
				t.Errorf("%s waiter got %q, want %q", name, r.l.Name(), want)
			}
			mustUnlock(t, r.l)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s waiter not woken by the release", name)
		}
	}
	mustUnlock(t, hy)
	check("any-member", forAny, time.Now(), "y")
	mustUnlock(t, hx)
	check("named", forX, time.Now(), "x")
}

// TestSetHandOverWritesOverTheLeaseLetGo: a member handed from a holder
// to a waiter is the waiter's whole: its metadata (none, then some), its
// fence and time of taking, the old lease's entry gone, and the member
// in neither the free ones nor held twice; once released, free again.
func TestSetHandOverWritesOverTheLeaseLetGo(t *testing.T) {
	srv, ctx := serve(t)
	rdb := srv.Client(t)
	key := keys.For(dlock.DefaultPrefix, keys.KindSet, "handed")
	holderC, _, _ := newClient(t, srv)
	hs := holderC.MutexSet("handed", dlock.WithTTL(time.Minute), dlock.WithMetadata("old"))
	if err := hs.Add(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	check := func(l *dlock.Lease, meta string, since time.Time) {
		t.Helper()
		ms, err := hs.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || !ms[0].Held || ms[0].Metadata != meta || ms[0].Fence != l.Fence() || ms[0].Since.Before(since.Add(-time.Second)) {
			t.Errorf("Members = %+v, want m held with metadata %q and fence %d since %v", ms, meta, l.Fence(), since)
		}
		if n := setTokens(t, rdb, key); n != 1 {
			t.Errorf("%d leases recorded, want the holder's alone", n)
		}
		if n := rdb.ZCard(ctx, key.Key()).Val(); n != 1 {
			t.Errorf("%d members in the pool while m is held, want 1", n)
		}
	}
	for _, meta := range []string{"", "new"} {
		held := mustAcquireMember(t, hs, "m")
		opts := []dlock.LockOption{dlock.WithTTL(time.Minute)}
		if meta != "" {
			opts = append(opts, dlock.WithMetadata(meta))
		}
		waiterC, _, _ := newClient(t, srv)
		got := make(chan *dlock.Lease, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := waiterC.MutexSet("handed", opts...).Acquire(wctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		for deadline := time.Now().Add(5 * time.Second); rdb.Exists(ctx, key.Part("queue")).Val() == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the waiter did not queue within 5s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // past the millisecond a newcomer may barge in
		released := time.Now()
		mustUnlock(t, held)
		l := <-got
		if l == nil {
			t.FailNow()
		}
		if l.Fence() <= held.Fence() {
			t.Errorf("handed over with fence %d, not above the last holder's %d", l.Fence(), held.Fence())
		}
		check(l, meta, released)
		mustUnlock(t, l)
		if n := setTokens(t, rdb, key); n != 0 {
			t.Errorf("%d leases recorded once all are released", n)
		}
		if st, err := hs.Status(ctx); err != nil || st.Members != 1 || st.Free != 1 {
			t.Errorf("Status once released = %+v, %v; want m free", st, err)
		}
	}
}

// TestSetExpiryWakes: a holder that never renews nor releases. A waiter
// (for any member, then for the member by name) gets the member when the
// lease runs out, with no release announced; the old lease can then
// neither renew nor release it, and the new holder keeps it.
func TestSetExpiryWakes(t *testing.T) {
	c, ctx := start(t)
	const ttl = 700 * time.Millisecond
	crashedSet := c.MutexSet("expiry", dlock.WithTTL(ttl), dlock.WithAutoRefresh(false))
	if err := crashedSet.Add(ctx, "only"); err != nil {
		t.Fatal(err)
	}
	s := c.MutexSet("expiry", dlock.WithTTL(time.Minute))
	rounds := []struct {
		name    string
		acquire func(context.Context) (*dlock.Lease, error)
		// stale is what the expired lease tries after the member was
		// taken again.
		stale func(*dlock.Lease) error
	}{
		{"any", s.Acquire, func(l *dlock.Lease) error { return l.Refresh(ctx, time.Minute) }},
		{"named", func(ctx context.Context) (*dlock.Lease, error) { return s.AcquireMember(ctx, "only") },
			func(l *dlock.Lease) error { return l.Unlock(ctx) }},
	}
	for _, r := range rounds {
		crashed := mustTake(t, ctx, crashedSet.TryAcquire)
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := r.acquire(wctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		waited := time.Since(start)
		if waited < ttl-100*time.Millisecond || waited > ttl+2*time.Second {
			t.Errorf("%s: waiter got the member after %v; the crashed holder's TTL was %v", r.name, waited, ttl)
		}
		if l.Fence() <= crashed.Fence() {
			t.Errorf("%s: fence %d not above the expired lease's %d", r.name, l.Fence(), crashed.Fence())
		}
		select {
		case <-crashed.Lost():
		case <-time.After(time.Second):
			t.Errorf("%s: the expired lease's Lost() did not close", r.name)
		}
		if err := r.stale(crashed); !errors.Is(err, dlock.ErrLost) {
			t.Errorf("%s: stale lease: %v, want ErrLost", r.name, err)
		}
		if held, err := l.Held(ctx); err != nil || !held {
			t.Errorf("%s: new holder's Held = %v, %v; want true", r.name, held, err)
		}
		if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: TryAcquire: %v, want ErrNotAcquired", r.name, err)
		}
		ms, err := s.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || !ms[0].Held || ms[0].Fence != l.Fence() {
			t.Errorf("%s: Members = %+v; want only, held with fence %d", r.name, ms, l.Fence())
		}
		mustUnlock(t, l)
	}
}

func TestSetMembers(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("listed", dlock.WithTTL(time.Minute), dlock.WithMetadata("job-1"))
	if err := s.Add(ctx, "c", "a", "b"); err != nil {
		t.Fatal(err)
	}
	lb := mustAcquireMember(t, s, "b")
	mustUnlock(t, lb)
	before := time.Now().Add(-time.Second)
	la := mustAcquireMember(t, s, "a")
	defer la.Unlock(ctx)
	ms, err := s.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("Members = %+v, want 3", ms)
	}
	a, b, cm := ms[0], ms[1], ms[2]
	if a.Name != "a" || !a.Held || a.Metadata != "job-1" || a.Fence != la.Fence() || a.Removing ||
		a.TTL <= 50*time.Second || a.TTL > time.Minute || a.Since.Before(before) || a.Since.After(time.Now().Add(time.Second)) {
		t.Errorf("held member: %+v (fence %d)", a, la.Fence())
	}
	if b.Name != "b" || b.Held || b.Fence != lb.Fence() || b.TTL != 0 || b.Metadata != "" || !b.Since.IsZero() {
		t.Errorf("released member: %+v, want free with last fence %d", b, lb.Fence())
	}
	if cm.Name != "c" || cm.Held || cm.Fence != 0 {
		t.Errorf("never used member: %+v", cm)
	}

	// Several pages, each member once, in byte order of names.
	big := c.MutexSet("big")
	var names []string
	for i := range 2500 {
		names = append(names, fmt.Sprintf("m%05d", i))
	}
	if err := big.Add(ctx, names...); err != nil {
		t.Fatal(err)
	}
	ms, err = big.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(ms))
	for i, m := range ms {
		got[i] = m.Name
	}
	if !slices.Equal(got, names) {
		t.Errorf("Members of 2500 listed %d, first %v", len(got), got[:min(len(got), 3)])
	}
}

func TestSetRemove(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	s := c.MutexSet("shrink", dlock.WithTTL(time.Minute))
	if err := s.Add(ctx, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	la := mustAcquireMember(t, s, "a")

	// A free member leaves at once; unknown names are ignored.
	if err := s.Remove(ctx, "b", "ghost"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquireMember(ctx, "b"); !errors.Is(err, dlock.ErrNoMember) {
		t.Fatalf("TryAcquireMember of a removed member: %v, want ErrNoMember", err)
	}

	// A held member stays with its holder until released, and nobody else
	// can take it meanwhile.
	if err := s.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if held, err := la.Held(ctx); err != nil || !held {
		t.Fatalf("holder's Held after Remove = %v, %v; want true", held, err)
	}
	if err := la.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("holder's Refresh after Remove: %v", err)
	}
	if _, err := s.TryAcquireMember(ctx, "a"); !errors.Is(err, dlock.ErrNoMember) {
		t.Fatalf("TryAcquireMember of a member being removed: %v, want ErrNoMember", err)
	}
	ms, err := s.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Name != "a" || !ms[0].Removing || !ms[0].Held || ms[1].Name != "c" || ms[1].Removing {
		t.Fatalf("Members while a is being removed: %+v", ms)
	}
	lc, err := s.TryAcquire(ctx)
	if err != nil || lc.Name() != "c" {
		t.Fatalf("TryAcquire = %v, %v; want c", lc, err)
	}
	mustUnlock(t, la)
	ms, err = s.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Name != "c" {
		t.Fatalf("Members after the removed member's release: %+v, want only c", ms)
	}

	// Adding a member back while its removal is pending cancels it.
	if err := s.Remove(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if held, err := lc.Held(ctx); err != nil || !held {
		t.Fatalf("holder's Held after Remove and Add = %v, %v; want true", held, err)
	}
	mustUnlock(t, lc)
	lc2 := mustAcquireMember(t, s, "c")
	if lc2.Fence() <= lc.Fence() {
		t.Errorf("fence %d after %d", lc2.Fence(), lc.Fence())
	}
	mustUnlock(t, lc2)

	// A member removed and added again gets fences above its old ones.
	if err := s.Remove(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	lc3 := mustAcquireMember(t, s, "c")
	if lc3.Fence() <= lc2.Fence() {
		t.Errorf("fence %d after re-adding, not above %d", lc3.Fence(), lc2.Fence())
	}
	mustUnlock(t, lc3)

	// So it does when the set was emptied, and the clock is behind its old
	// fences (stepped back): the set's highest fence outlives it while it
	// is ahead of the clock, a minute more, and no longer.
	ahead := time.Now().Add(time.Hour).UnixMicro()
	if err := rdb.Set(ctx, "dlock:{shrink}:set:last", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	lc4 := mustAcquireMember(t, s, "c")
	mustUnlock(t, lc4)
	if err := s.Remove(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if ks, err := rdb.Keys(ctx, "*").Result(); err != nil || !slices.Equal(ks, []string{"dlock:{shrink}:set:last"}) {
		t.Errorf("keys left after the set was emptied: %q, %v; want its last fence alone", ks, err)
	}
	if ttl := rdb.PTTL(ctx, "dlock:{shrink}:set:last").Val(); ttl < time.Hour || ttl > time.Hour+61*time.Second {
		t.Errorf("the emptied set's last fence lives %v; want while ahead of the clock, and a minute", ttl)
	}
	if err := s.Add(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	lc5 := mustAcquireMember(t, s, "c")
	if lc5.Fence() <= lc4.Fence() || lc4.Fence() <= uint64(ahead) {
		t.Errorf("fence %d after re-adding to an emptied set, not above %d", lc5.Fence(), lc4.Fence())
	}
	mustUnlock(t, lc5)
}

// TestSetLostOnFlush: the set vanishes under a holder; Do's context is
// cancelled with cause ErrLost, within the TTL.
func TestSetLostOnFlush(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	const ttl = 900 * time.Millisecond
	s := c.MutexSet("flush", dlock.WithTTL(ttl))
	if err := s.Add(ctx, "m1", "m2"); err != nil {
		t.Fatal(err)
	}
	var got string
	err := s.Do(ctx, func(ctx context.Context, member string) error {
		got = member
		return flushInside(t, rdb, ttl)(ctx)
	})
	if !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Do = %v, want the release's ErrLost", err)
	}
	if got != "m1" {
		t.Errorf("Do ran with member %q, want m1", got)
	}
}

func TestSetDo(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("do")
	if err := s.Add(ctx, "only"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := s.Do(ctx, func(ctx context.Context, member string) error {
		if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryAcquire inside Do: %v, want ErrNotAcquired", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("member not released by Do: %v", err)
	}
	mustUnlock(t, l)
}

func TestSetBadInput(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	long := strings.Repeat("x", keys.MaxName+1)
	for name, s := range map[string]*dlock.MutexSet{
		"empty name":     c.MutexSet(""),
		"over-long name": c.MutexSet(long),
		"zero TTL":       c.MutexSet("s", dlock.WithTTL(0)),
		"nil client":     dlock.New(nil).MutexSet("s"),
	} {
		checks := map[string]error{}
		checks["Add"] = s.Add(ctx, "m")
		checks["Remove"] = s.Remove(ctx, "m")
		_, checks["TryAcquire"] = s.TryAcquire(ctx)
		_, checks["Acquire"] = s.Acquire(ctx)
		_, checks["TryAcquireMember"] = s.TryAcquireMember(ctx, "m")
		_, checks["AcquireMember"] = s.AcquireMember(ctx, "m")
		_, checks["Members"] = s.Members(ctx)
		_, checks["Status"] = s.Status(ctx)
		checks["Do"] = s.Do(ctx, func(context.Context, string) error { return nil })
		for call, err := range checks {
			if !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("%s: %s: %v, want ErrInvalid", name, call, err)
			}
		}
	}

	s := c.MutexSet("s")
	for name, err := range map[string]error{
		"Add()":                  s.Add(ctx),
		"Add(\"\")":              s.Add(ctx, ""),
		"Add(over-long)":         s.Add(ctx, long),
		"Add(ok, \"\")":          s.Add(ctx, "ok", ""),
		"Remove()":               s.Remove(ctx),
		"Remove(\"\")":           s.Remove(ctx, ""),
		"TryAcquireMember(\"\")": func() error { _, err := s.TryAcquireMember(ctx, ""); return err }(),
		"AcquireMember(long)":    func() error { _, err := s.AcquireMember(ctx, long); return err }(),
	} {
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("bad calls wrote %d keys (%v); want none", n, err)
	}
	// Any bytes make a member.
	odd := []string{"{tag}", "a}b{", "nul\x00byte", "ünï ✓", strings.Repeat("n", keys.MaxName)}
	if err := s.Add(ctx, odd...); err != nil {
		t.Fatal(err)
	}
	for _, m := range odd {
		l, err := s.TryAcquireMember(ctx, m)
		if err != nil {
			t.Errorf("TryAcquireMember(%q): %v", m, err)
			continue
		}
		if l.Name() != m {
			t.Errorf("lease name %q, want %q", l.Name(), m)
		}
		mustUnlock(t, l)
	}
}

func TestSetStatus(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("summary", dlock.WithTTL(time.Minute))
	if err := s.Add(ctx, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Members != 3 || st.Free != 3 || st.Held || st.TTL != 0 || st.Fence != 0 {
		t.Fatalf("status of a new set: %+v", st)
	}
	short := mustTake(t, ctx, c.MutexSet("summary", dlock.WithTTL(20*time.Second)).TryAcquire)
	long := mustTake(t, ctx, s.TryAcquire)
	st, err = s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Members != 3 || st.Free != 1 || !st.Held || st.TTL <= 15*time.Second || st.TTL > 20*time.Second || st.Fence != long.Fence() {
		t.Fatalf("status with two held: %+v; want the 20s lease's TTL and fence %d", st, long.Fence())
	}
	mustUnlock(t, short, long)
	st, err = s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Free != 3 || st.Held || st.Fence != long.Fence() {
		t.Fatalf("status after release: %+v", st)
	}

	// A lease that never expires shows a TTL of -1.
	forever, err := c.MutexSet("summary", dlock.WithNoExpiry()).TryAcquireMember(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if st, err = s.Status(ctx); err != nil || !st.Held || st.TTL != -1 || st.Free != 2 {
		t.Errorf("status with a lease that never expires: %+v, %v; want TTL -1", st, err)
	}
	ms, err := s.Members(ctx)
	if err != nil || len(ms) != 3 || !ms[1].Held || ms[1].TTL != -1 || ms[1].Fence != forever.Fence() {
		t.Errorf("Members with a lease that never expires: %+v, %v", ms, err)
	}
	mustUnlock(t, forever)
}

func TestSetRoundTrips(t *testing.T) {
	srv, ctx := serve(t)
	c, _, cnt := newClient(t, srv)
	s := c.MutexSet("rt")
	if err := s.Add(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	for _, acquire := range []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return s.TryAcquire(ctx) },
		func() (*dlock.Lease, error) { return s.TryAcquireMember(ctx, "b") },
	} {
		warm, err := acquire() // the first run of each script pays a NOSCRIPT fallback
		if err != nil {
			t.Fatal(err)
		}
		mustUnlock(t, warm)
		before := cnt.Load()
		l, err := acquire()
		if err != nil {
			t.Fatal(err)
		}
		mustUnlock(t, l)
		if n := cnt.Load() - before; n != 2 {
			t.Errorf("acquire+Unlock sent %d commands, want 2", n)
		}
	}
}

func TestSetStallTimeout(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("stuck", dlock.WithTTL(time.Minute))
	if err := s.Add(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	h := mustAcquireMember(t, s, "a")
	defer h.Unlock(ctx)
	const stall = 300 * time.Millisecond
	for name, acquire := range map[string]func(*dlock.MutexSet) error{
		"any":   func(s *dlock.MutexSet) error { _, err := s.Acquire(ctx); return err },
		"named": func(s *dlock.MutexSet) error { _, err := s.AcquireMember(ctx, "a"); return err },
	} {
		givesUpOnStall(t, name, stall, func() error {
			return acquire(c.MutexSet("stuck", dlock.WithStallTimeout(stall)))
		})
	}
}

// A retried acquire script must find the member its token already took,
// not take a second one.
func TestSetRetriedAcquireIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := &hook{match: isTry, act: sentTwice(false)}
	c, _ := hooked(t, srv, h)
	ctx := t.Context()
	s := c.MutexSet("retry", dlock.WithTTL(time.Minute))
	if err := s.Add(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	warm, err := s.TryAcquire(ctx) // load the script
	if err != nil {
		t.Fatal(err)
	}
	mustUnlock(t, warm)
	h.armed.Store(true)
	l := mustTake(t, ctx, s.TryAcquire)
	defer l.Unlock(ctx)
	if h.armed.Load() {
		t.Fatal("the hook did not run the script twice")
	}
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Free != 1 {
		t.Errorf("%d of 2 members free after one TryAcquire sent twice; want 1", st.Free)
	}
}

// TestSetRenewal: auto-renewal keeps a member many TTLs long.
func TestSetRenewal(t *testing.T) {
	c, ctx := start(t)
	s := c.MutexSet("renew", dlock.WithTTL(time.Second))
	if err := s.Add(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	l := mustAcquireMember(t, s, "a")
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := s.Acquire(wctx); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Acquire = %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	select {
	case <-l.Lost():
		t.Fatal("renewed lease reported lost")
	default:
	}
	mustUnlock(t, l)
}

// TestSetCluster runs MutexSets on a 3+3 Redis Cluster: exclusion under
// contention, and waiters woken through sharded pub/sub on sets whose
// names hash to every master.
func TestSetCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	t.Run("exclusion", func(t *testing.T) {
		members := []string{"m1", "m2", "m3"}
		if err := c.MutexSet("cluster-set").Add(ctx, members...); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		u := newSetUse()
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = contendSet(cctx, c.MutexSet("cluster-set", dlock.WithTTL(5*time.Second)).Acquire, dir, time.Millisecond, u)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		checkSetUse(t, u, members)
	})

	t.Run("wake on every shard", func(t *testing.T) {
		for i := range 9 {
			s := c.MutexSet(fmt.Sprintf("cluster-set-wake-%d", i), dlock.WithTTL(30*time.Second))
			if err := s.Add(ctx, "only"); err != nil {
				t.Fatal(err)
			}
			h := mustTake(t, ctx, s.TryAcquire)
			handOff(t, ctx, h, s.Acquire, 50*time.Millisecond)
		}
	})
}

// BenchmarkMutexSetTryAcquireUnlock takes and releases the least recently
// used member of sets of growing size: the cost must stay flat (O(log n)),
// two round trips per op. redis-µs/op is the time Redis spent in the two
// scripts, from INFO commandstats: the part that depends on the set's
// size, without the network and client noise.
func BenchmarkMutexSetTryAcquireUnlock(b *testing.B) {
	srv := redistest.Start(b)
	for _, n := range []int{10, 10_000, 1_000_000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			c, rdb, cnt := newClient(b, srv)
			ctx := context.Background()
			s := c.MutexSet(fmt.Sprintf("bench-%d", n))
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("member-%07d", i)
			}
			if err := s.Add(ctx, names...); err != nil {
				b.Fatal(err)
			}
			warm, err := s.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := warm.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			usec := commandMicros(b, rdb)
			before := cnt.Load()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l, err := s.TryAcquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cnt.Load()-before)/float64(b.N), "rt/op")
			b.ReportMetric(float64(commandMicros(b, rdb)-usec)/float64(b.N), "redis-µs/op")
		})
	}
}

// TestSetQueue: waiters for a member queue in arrival order whether they
// name it or take any; Status lists them with what they wait for; a
// release goes to the first that would take the member, and Add hands a
// new member to the first waiter for any member.
func TestSetQueue(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	s := c.MutexSet("queue", dlock.WithTTL(30*time.Second))
	if err := s.Add(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	hx := mustAcquireMember(t, s, "x")
	got := make(chan *dlock.Lease, 3)
	queue := func(meta string, acquire func(*dlock.MutexSet, context.Context) (*dlock.Lease, error), n int) {
		go func() {
			l, err := acquire(c.MutexSet("queue", dlock.WithMetadata(meta)), ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		waitQueued(t, s, n)
	}
	anyMember := func(s *dlock.MutexSet, ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx) }
	memberX := func(s *dlock.MutexSet, ctx context.Context) (*dlock.Lease, error) { return s.AcquireMember(ctx, "x") }
	queue("any-1", anyMember, 1)
	queue("x", memberX, 2)
	queue("any-2", anyMember, 3)
	var ws []string
	for _, w := range statusOf(t, s).Waiters {
		ws = append(ws, w.Metadata+"/"+w.Member)
	}
	if want := []string{"any-1/", "x/x", "any-2/"}; !slices.Equal(ws, want) {
		t.Fatalf("waiters %q, want %q", ws, want)
	}
	time.Sleep(5 * time.Millisecond) // past the millisecond a newcomer may barge in

	next := func(want string) *dlock.Lease {
		t.Helper()
		select {
		case l := <-got:
			if l == nil {
				t.FailNow()
			}
			ms, err := s.Members(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(ms, func(m dlock.MemberStatus) bool { return m.Held && m.Metadata == want }) {
				t.Errorf("members %+v after a hand-off; want one held by %q", ms, want)
			}
			return l
		case <-time.After(5 * time.Second):
			t.Fatalf("no waiter got a member; want %q", want)
		}
		return nil
	}
	mustUnlock(t, hx)
	first := next("any-1")
	if err := s.Add(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	second := next("any-2") // the new member, though "x" waits first: it waits for x
	if second.Name() != "y" {
		t.Errorf("the any-member waiter got %q, want the added member", second.Name())
	}
	mustUnlock(t, first)
	third := next("x")
	if third.Name() != "x" {
		t.Errorf("the waiter for x got %q", third.Name())
	}
	mustUnlock(t, second, third)
}

// TestSetWaiterWithoutEntryGetsNoOtherMember: a waiter for member a whose
// entry saying so is gone (an eviction, an operator) is passed over as
// dead, not taken for a waiter for any member: handed b, its
// AcquireMember("a") would return a lease on b while a is held.
func TestSetWaiterWithoutEntryGetsNoOtherMember(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	s := c.MutexSet("damaged", dlock.WithTTL(30*time.Second))
	if err := s.Add(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	ha, hb := mustAcquireMember(t, s, "a"), mustAcquireMember(t, s, "b")
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := s.AcquireMember(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, s, 1)
	if n, err := rdb.Del(ctx, "dlock:{damaged}:set:wmeta").Result(); err != nil || n != 1 {
		t.Fatalf("deleting the waiters' entries: %d, %v", n, err)
	}
	mustUnlock(t, hb)
	select {
	case l := <-got:
		t.Fatalf("AcquireMember(a) returned a lease on %q while a was held", l.Name())
	case <-time.After(1500 * time.Millisecond): // past a heartbeat
	}
	mustUnlock(t, ha)
	select {
	case l := <-got:
		if l == nil || l.Name() != "a" {
			t.Fatalf("AcquireMember(a) returned %v", l)
		}
		mustUnlock(t, l)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter for a did not get it once released")
	}
}

// TestSetManyDeadWaitersAhead: with more dead waiters queued ahead than
// one call prunes (a hundred), a refusal's wait until the first of them
// lapses is past already: the caller tries again at once, pruning a
// hundred more each time, instead of waiting for a wake-up (it read the
// negative wait as "only when woken", and got on at one heartbeat a
// second).
func TestSetManyDeadWaitersAhead(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	s := c.MutexSet("dead-ahead", dlock.WithTTL(30*time.Second))
	if err := s.Add(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	const base = "dlock:{dead-ahead}:set:"
	pipe := rdb.Pipeline()
	for i := range 450 {
		tok := fmt.Sprintf("dead-%03d", i)
		pipe.ZAdd(ctx, base+"queue", redis.Z{Score: float64(1 + i), Member: tok})
		pipe.ZAdd(ctx, base+"alive", redis.Z{Score: 1, Member: tok}) // lapsed in 1970
		pipe.HSet(ctx, base+"wmeta", tok, "0:")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, time.Second) // before, seconds: a heartbeat a second
	defer cancel()
	l, err := s.Acquire(actx)
	if err != nil {
		t.Fatalf("Acquire of a free member behind 450 dead waiters: %v", err)
	}
	mustUnlock(t, l)
}

// TestSetFreeMemberBesideOneKept: the least recently used free member is
// kept for a waiter ahead (here one that died without leaving, not yet
// passed over), but another member is free: TryAcquire takes that one
// rather than refuse, and Acquire does not wait for the dead waiter.
func TestSetFreeMemberBesideOneKept(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	s := c.MutexSet("kept", dlock.WithTTL(30*time.Second))
	if err := s.Add(ctx, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	const base = "dlock:{kept}:set:"
	alive := time.Now().Add(time.Minute).UnixMilli()
	for i, w := range []string{"ghost-any", "ghost-for-b"} {
		pipe := rdb.TxPipeline()
		pipe.ZAdd(ctx, base+"queue", redis.Z{Score: float64(1 + i), Member: w}) // arrived long ago
		pipe.ZAdd(ctx, base+"alive", redis.Z{Score: float64(alive), Member: w})
		pipe.HSet(ctx, base+"wmeta", w, map[string]string{"ghost-any": "0:", "ghost-for-b": "1:b"}[w])
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// a, the least recently used, is kept for the waiter for any member,
	// and b for the one waiting for b: c is free for nobody ahead.
	l, err := s.TryAcquire(ctx)
	if err != nil || l.Name() != "c" {
		t.Fatalf("TryAcquire beside members kept for waiters ahead: %v, %v; want c", l, err)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with every free member kept: %v, want ErrNotAcquired", err)
	}
	mustUnlock(t, l) // c goes to the waiter for any member, a is free for nobody
	if l, err := s.TryAcquire(ctx); err != nil || l.Name() != "a" {
		t.Fatalf("TryAcquire once c was handed to the waiter for any member: %v, %v; want a", l, err)
	} else {
		mustUnlock(t, l)
	}
}

// TestSetRemovedHeldLeavesNoKeys: every member removed, one of them
// held by a holder that dies (its lease expires, never released); the
// set's keys must not stay for good (they did: only a later call on the
// set would have dropped the expired member).
func TestSetRemovedHeldLeavesNoKeys(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	s := c.MutexSet("gone", dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRefresh(false))
	if err := s.Add(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	l, err := s.TryAcquireMember(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	_ = l // the holder "dies": no renewal, no release
	if err := s.Remove(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status: members %d", st.Members)
	ks, _ := rdb.Keys(ctx, "*").Result()
	for _, k := range ks {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < 0 {
			t.Errorf("key %q lives forever (PTTL %v) after every member was removed and the last lease expired", k, ttl)
		}
	}
}

// TestSetFadeKeepsRenewedHolder: with every member removed but a
// held one, the holder that renews keeps it (and the set's keys) past
// several TTLs; once it dies the keys go; an Add makes them lasting again.
func TestSetFadeKeepsRenewedHolder(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	s := c.MutexSet("fade", dlock.WithTTL(300*time.Millisecond))
	if err := s.Add(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	l := mustAcquireMember(t, s, "a")
	if err := s.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if held, err := l.Held(ctx); err != nil || !held {
		t.Fatalf("renewed holder's Held = %v, %v", held, err)
	}
	select {
	case <-l.Lost():
		t.Fatal("lost")
	default:
	}
	if err := s.Add(ctx, "a"); err != nil { // cancels the removal
		t.Fatal(err)
	}
	for _, k := range rdb.Keys(ctx, "*").Val() {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl >= 0 && !strings.Contains(k, "queue") && !strings.Contains(k, "alive") && !strings.Contains(k, "wmeta") {
			t.Errorf("key %q expires (%v) after Add cancelled the removal", k, ttl)
		}
	}
	mustUnlock(t, l)
	if err := s.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if ks := rdb.Keys(ctx, "*").Val(); len(ks) != 1 {
		t.Errorf("keys after emptying: %q", ks)
	}
}

// TestSetEmptiedKeepsWaiters: a waiter for any member waits on a set
// whose last member is removed while held. When that holder releases,
// the set empties; the README says Acquire then waits for an Add and "a
// new member goes to the first caller waiting for any member", and that a
// newcomer may take a free member ahead of a waiter only while it has
// waited under a millisecond. The new member must go to the waiter, not
// to a newcomer's TryAcquire.
func TestSetEmptiedKeepsWaiters(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	s := c.MutexSet("emptied", dlock.WithTTL(30*time.Second))
	if err := s.Add(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	hx := mustAcquireMember(t, s, "x")
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.MutexSet("emptied", dlock.WithTTL(30*time.Second), dlock.WithMetadata("waiter")).Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, s, 1)
	time.Sleep(5 * time.Millisecond) // past the millisecond a newcomer may barge in
	if err := s.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	mustUnlock(t, hx) // x leaves; the set is empty now
	if st := statusOf(t, s); len(st.Waiters) != 1 {
		t.Errorf("after the last member left, %d waiters queued, want the 1 still waiting", len(st.Waiters))
	}
	if err := s.Add(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	nl, err := s.TryAcquire(ctx)
	if err == nil {
		t.Errorf("a newcomer's TryAcquire took %q, added while a caller waited for any member", nl.Name())
		mustUnlock(t, nl)
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if l := receive(t, got, "the waiter's member"); l != nil {
		mustUnlock(t, l)
	}
}

// TestSetNoBargingPastHundredWaiters: README: "a caller that finds a
// member free may take it ahead of a waiter for it only while that waiter
// has waited under a millisecond", and a waiter further back than the
// first 100, "waiting for a member nobody ahead of it wants, takes it at
// its next heartbeat". A newcomer must not take b from the waiter for b
// that has waited for seconds, just because 100 waiters for another
// member are queued ahead of it.
func TestSetNoBargingPastHundredWaiters(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	s := c.MutexSet("deep", dlock.WithTTL(30*time.Second))
	if err := s.Add(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	ha, hb := mustAcquireMember(t, s, "a"), mustAcquireMember(t, s, "b")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := 0; i < 100; i++ {
		go func() { _, _ = s.AcquireMember(wctx, "a") }()
	}
	waitQueued(t, s, 100)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.MutexSet("deep", dlock.WithTTL(30*time.Second), dlock.WithMetadata("waiter-b")).AcquireMember(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueued(t, s, 101)
	time.Sleep(1500 * time.Millisecond) // the waiter for b has waited long
	mustUnlock(t, hb)
	nl, err := s.TryAcquireMember(ctx, "b")
	if err == nil {
		t.Errorf("a newcomer took b ahead of the waiter for b queued 1.5s ago (fence %d)", nl.Fence())
		mustUnlock(t, nl)
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if l := receive(t, got, "the waiter for b's member"); l != nil {
		mustUnlock(t, l)
	}
	cancel()
	mustUnlock(t, ha)
}

// setTokens counts the tokens a set's records index (see lua/lib/set.lua):
// one for each lease released by no one yet.
func setTokens(t *testing.T, rdb redis.UniversalClient, key keys.Lock) int {
	t.Helper()
	fields, err := rdb.HKeys(t.Context(), key.Part("held")).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fields {
		if strings.HasPrefix(f, "\x00") {
			n++
		}
	}
	return n
}

// TestSetConvertsOlderLayout: a set an older dlock kept in eleven keys
// (":held" a zset of expiries among them) is converted at the first call
// that meets it: leases carried over with their holders, metadata,
// fences and expiries, free members in their order of last use, a member
// removed while held still leaving with its lease, fences rising above
// the old ones, and no key of the older layout left.
func TestSetConvertsOlderLayout(t *testing.T) {
	srv, ctx := serve(t)
	rdb := srv.Client(t)
	c, _, _ := newClient(t, srv)
	key := keys.For(dlock.DefaultPrefix, keys.KindSet, "old")
	now := time.Now()
	since := now.Add(-time.Second).UnixMilli()
	old := func() {
		t.Helper()
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		olderSetWithLeases(t, rdb, key, now)
	}
	s := c.MutexSet("old", dlock.WithTTL(time.Minute))
	old()
	var took []string
	for range 3 {
		l, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire on the older layout: %v", err)
		}
		if l.Fence() <= 200 {
			t.Errorf("fence %d, not above the older layout's 200", l.Fence())
		}
		took = append(took, l.Name())
	}
	if !slices.Equal(took, []string{"c", "e", "b"}) {
		t.Errorf("TryAcquire took %v; want [c e b]: never used, then least recently used", took)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with a and d held by older leases: %v; want ErrNotAcquired", err)
	}
	if _, err := s.TryAcquireMember(ctx, "d"); !errors.Is(err, dlock.ErrNoMember) {
		t.Errorf("TryAcquireMember(d), removed while held: %v; want ErrNoMember", err)
	}
	ms, err := s.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 5 || ms[0].Name != "a" || !ms[0].Held || ms[0].Metadata != "meta of a" || ms[0].Fence != 100 ||
		ms[0].Since.UnixMilli() != since || ms[0].TTL < 50*time.Second || !ms[3].Held || !ms[3].Removing || ms[3].Fence != 120 {
		t.Errorf("Members after the conversion = %+v", ms)
	}
	ks, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ks)
	if want := []string{key.Key(), key.Part("held"), key.Part("last"), key.Part("removing")}; !slices.Equal(ks, want) {
		t.Errorf("keys after the conversion: %q; want %q", ks, want)
	}

	// Every other call converts too: Status, and Add of a set whose
	// members are all free (no ":held" zset), which leaves the older
	// layout's keys until a conversion deletes them.
	old()
	if st, err := s.Status(ctx); err != nil || st.Members != 5 || st.Free != 3 || st.Fence != 200 {
		t.Errorf("Status of the older layout = %+v, %v; want 5 members (d until its lease ends), 3 free", st, err)
	}
	old()
	if err := rdb.Del(ctx, key.Part("held"), key.Part("owner"), key.Part("leases"), key.Part("removing")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key.Part("free"), key.Part("fences"), key.Part("meta"), key.Part("since")).Val(); n != 0 {
		t.Errorf("%d keys of the older layout left after Add", n)
	}
	if l, err := s.TryAcquireMember(ctx, "b"); err != nil || l.Fence() <= 200 {
		t.Errorf("TryAcquireMember(b) = %v; want a fence above 200", err)
	}
}

// TestSetLeavesNoTokenBehind: the records index each lease's token (see
// lua/lib/set.lua) only until it is released, or its member is taken
// again or leaves the set after the lease ran out: no entry outlives
// them, whichever way a lease ends.
func TestSetLeavesNoTokenBehind(t *testing.T) {
	srv, ctx := serve(t)
	rdb := srv.Client(t)
	s, short, key := setWithShortLeases(t, srv, "tokens", "a", "b", "c")
	want := func(n int, when string) {
		t.Helper()
		if got := setTokens(t, rdb, key); got != n {
			t.Errorf("%d tokens indexed %s; want %d", got, when, n)
		}
	}
	// Released while being removed.
	la := mustAcquireMember(t, s, "a")
	if err := s.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	want(1, "while a is held")
	mustUnlock(t, la)
	want(0, "once a, being removed, was released")
	// Ran out while being removed, then found by TryAcquireMember.
	removedAsItsHolderDies(t, s, short, "b")
	if _, err := s.TryAcquireMember(ctx, "b"); !errors.Is(err, dlock.ErrNoMember) {
		t.Errorf("TryAcquireMember(b) after its removal's lease ran out: %v; want ErrNoMember", err)
	}
	want(0, "once b, being removed, ran out and was looked for")
	// Ran out, then taken again.
	lc, err := short.TryAcquireMember(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	<-lc.Lost()
	time.Sleep(50 * time.Millisecond)
	want(1, "after c's lease ran out unreleased")
	lc2 := mustAcquireMember(t, s, "c")
	want(1, "once c was taken again")
	mustUnlock(t, lc2)
	want(0, "at the end")
	if ms, err := s.Members(ctx); err != nil || len(ms) != 1 || ms[0].Name != "c" || ms[0].Held {
		t.Errorf("Members = %+v, %v; want c alone, free", ms, err)
	}
}

// TestSetConvertKeepsNewLeases: a set an older dlock left at rest has no
// ":held" key (no member held), so a newer client's scripts meet no
// WRONGTYPE and use it as it is, leaving the older layout's ":free" and
// ":fences" behind (an older client's Add after a conversion leaves a
// ":free" too). The conversion a later Add or Remove runs must then keep
// the leases the newer clients hold: never free a live lease's member,
// nor drop a member being removed while its lease is live.
func TestSetConvertKeepsNewLeases(t *testing.T) {
	srv, ctx := serve(t)
	rdb := srv.Client(t)
	c, _, _ := newClient(t, srv)
	key := olderSetAtRest(t, rdb, "rest")
	s := c.MutexSet("rest", dlock.WithTTL(time.Minute))
	la := mustAcquireMember(t, s, "a")
	lb := mustAcquireMember(t, s, "b")
	if err := s.Remove(ctx, "b"); err != nil { // converts: b is held, so it stays until released
		t.Fatal(err)
	}
	for _, l := range []*dlock.Lease{la, lb} {
		if ok, err := l.Held(ctx); err != nil || !ok {
			t.Errorf("%s.Held after the conversion = %v, %v; want true: its lease is live", l.Name(), ok, err)
		}
	}
	if l, err := s.TryAcquireMember(ctx, "a"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireMember(a) while a's lease is live: taken %v, %v; want ErrNotAcquired (two holders)", l != nil, err)
	}
	if err := s.Add(ctx, "b"); err != nil { // cancels b's removal
		t.Fatal(err)
	}
	if l, err := s.TryAcquireMember(ctx, "b"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireMember(b) while b's lease is live: taken %v, %v; want ErrNotAcquired (two holders)", l != nil, err)
	}
	if n := rdb.Exists(ctx, key.Part("free"), key.Part("fences")).Val(); n != 0 {
		t.Errorf("%d keys of the older layout left after Remove", n)
	}

	// An older client's Add after the conversion (ZADD NX 0 to the pool,
	// ZADD 0 to ":free", no read of ":held" with no waiter) leaves a
	// ":free" again: the next Remove converts once more, and must keep
	// the live leases.
	lc := mustAcquireMember(t, s, "c")
	if err := rdb.ZAddNX(ctx, key.Key(), redis.Z{Member: "z"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, key.Part("free"), redis.Z{Member: "z"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	if ok, err := lc.Held(ctx); err != nil || !ok {
		t.Errorf("c.Held after an older client's Add and a Remove = %v, %v; want true", ok, err)
	}
	if l, err := s.TryAcquireMember(ctx, "c"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireMember(c) while c's lease is live: taken %v, %v; want ErrNotAcquired (two holders)", l != nil, err)
	}
}

// TestSetOlderLayoutAtRestKeepsItsOrder: a set an older dlock left at rest
// (no member held, so no ":held" zset) keeps its free members' order of
// last use and their fences when a newer client first takes from it, as
// a set with a lease does (TestSetConvertsOlderLayout).
func TestSetOlderLayoutAtRestKeepsItsOrder(t *testing.T) {
	srv, ctx := serve(t)
	rdb := srv.Client(t)
	c, _, _ := newClient(t, srv)
	key := olderSetAtRest(t, rdb, "rest")
	s := c.MutexSet("rest", dlock.WithTTL(time.Minute))
	l, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Name() != "c" {
		t.Errorf("TryAcquire took %s; want c, never used (then a, then b)", l.Name())
	}
	ms, err := s.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if want := map[string]uint64{"a": 100, "b": 150}[m.Name]; m.Name != l.Name() && m.Fence != want {
			t.Errorf("Members: %s's fence %d; want %d, its last in the older layout", m.Name, m.Fence, want)
		}
	}
	if n := rdb.Exists(ctx, key.Part("free"), key.Part("fences")).Val(); n != 0 {
		t.Errorf("%d keys of the older layout left once a newer client took a member", n)
	}
}

// TestSetRemovedMemberLeavesWhenItsLeaseRunsOut: a member removed while
// held, whose holder never released it, leaves the set once its lease
// has run out at the next acquire (as it did when acquires reclaimed
// expired leases), also in a set whose callers name the members they
// take: nothing of it stays, not its record, its token's entry, its
// place in the pool nor in the removing set.
func TestSetRemovedMemberLeavesWhenItsLeaseRunsOut(t *testing.T) {
	srv, ctx := serve(t)
	rdb := srv.Client(t)
	s, short, key := setWithShortLeases(t, srv, "named", "a", "b")
	removedAsItsHolderDies(t, s, short, "a")
	for range 3 {
		mustUnlock(t, mustAcquireMember(t, s, "b"))
	}
	if rm := rdb.SMembers(ctx, key.Part("removing")).Val(); len(rm) != 0 {
		t.Errorf("members being removed: %q; want none, a's lease ran out", rm)
	}
	if pool := rdb.ZRange(ctx, key.Key(), 0, -1).Val(); !slices.Equal(pool, []string{"b"}) {
		t.Errorf("pool %q; want [b]", pool)
	}
	if n := setTokens(t, rdb, key); n != 0 {
		t.Errorf("%d tokens indexed; want none", n)
	}
	if f := rdb.HKeys(ctx, key.Part("held")).Val(); !slices.Equal(f, []string{"b"}) {
		t.Errorf("records %q; want b's alone", f)
	}
}

// setWithShortLeases adds members to the set called name, and returns
// two handles of it on one client, s with a minute's TTL and short with
// leases of 30ms that renew nothing (a holder that dies), and its keys.
func setWithShortLeases(t *testing.T, srv *redistest.Server, name string, members ...string) (s, short *dlock.MutexSet, key keys.Lock) {
	t.Helper()
	c, _, _ := newClient(t, srv)
	s = c.MutexSet(name, dlock.WithTTL(time.Minute))
	short = c.MutexSet(name, dlock.WithTTL(30*time.Millisecond), dlock.WithAutoRefresh(false))
	if err := s.Add(t.Context(), members...); err != nil {
		t.Fatal(err)
	}
	return s, short, keys.For(dlock.DefaultPrefix, keys.KindSet, name)
}

// removedAsItsHolderDies takes member m with short (see
// setWithShortLeases), removes it with s, and returns once its lease has
// run out unreleased, as when its holder died.
func removedAsItsHolderDies(t *testing.T, s, short *dlock.MutexSet, m string) {
	t.Helper()
	l, err := short.TryAcquireMember(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	time.Sleep(50 * time.Millisecond) // Lost comes before Redis' end of the lease
}

// olderSetWithLeases writes the set of keys key as an older dlock kept it
// in eleven keys at now: members a to e, a held with metadata and d held
// and removed (both until a minute on, since a second ago; fences 100
// and 120), c never used, then e and b used in that order (b's fence
// 50), and 200 the set's last fence.
func olderSetWithLeases(t *testing.T, rdb redis.UniversalClient, key keys.Lock, now time.Time) {
	t.Helper()
	ctx := t.Context()
	later, since := now.Add(time.Minute).UnixMilli(), now.Add(-time.Second).UnixMilli()
	p := rdb.TxPipeline()
	for _, m := range []string{"a", "b", "c", "d", "e"} {
		p.ZAdd(ctx, key.Key(), redis.Z{Member: m})
	}
	p.ZAdd(ctx, key.Part("held"), redis.Z{Member: "a", Score: float64(later)}, redis.Z{Member: "d", Score: float64(later)})
	p.HSet(ctx, key.Part("owner"), "a", "toka", "d", "tokd")
	p.HSet(ctx, key.Part("leases"), "toka", "a", "tokd", "d")
	p.HSet(ctx, key.Part("meta"), "a", "meta of a")
	p.HSet(ctx, key.Part("since"), "a", since, "d", since)
	p.HSet(ctx, key.Part("fences"), "a", 100, "b", 50, "d", 120)
	p.SAdd(ctx, key.Part("removing"), "d")
	p.ZAdd(ctx, key.Part("free"), redis.Z{Member: "c"}, redis.Z{Member: "e", Score: float64(now.Add(-2 * time.Second).UnixMicro())},
		redis.Z{Member: "b", Score: float64(now.Add(-time.Second).UnixMicro())})
	p.Set(ctx, key.Part("last"), 200, 0)
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSetConversionEndsWithCtx: a call that meets a set in the older
// layout converts it first; a conversion that Redis does not answer ends
// with the caller's ctx, as the call's own script does, and not at
// go-redis' read timeout.
func TestSetConversionEndsWithCtx(t *testing.T) {
	srv, ctx := serve(t)
	key := keys.For(dlock.DefaultPrefix, keys.KindSet, "silent")
	olderSetWithLeases(t, srv.Client(t), key, time.Now())
	h := &silentAfterWrongType{until: make(chan struct{})}
	defer close(h.until)
	rdb := srv.Client(t)
	rdb.AddHook(h)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.MutexSet("silent").Status(sctx)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !h.met.Load() {
			t.Errorf("Status whose conversion Redis leaves unanswered: %v (WRONGTYPE met %v); want its ctx's deadline", err, h.met.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Status still waits for the conversion 5s after its ctx's deadline")
	}
}

// silentAfterWrongType is a go-redis hook under which Redis answers
// nothing more, until until closes, once it has replied WRONGTYPE.
type silentAfterWrongType struct {
	met   atomic.Bool
	until chan struct{}
}

func (h *silentAfterWrongType) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *silentAfterWrongType) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *silentAfterWrongType) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.met.Load() {
			<-h.until
		}
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
			h.met.Store(true)
		}
		return err
	}
}

// olderSetAtRest writes the set called name as an older dlock leaves it
// with no member held (no ":held" key): members a, b and c, all free, c
// never used, then a and b used in that order, with fences 100 and 150,
// and 200 the set's last. It returns the set's keys.
func olderSetAtRest(t *testing.T, rdb redis.UniversalClient, name string) keys.Lock {
	t.Helper()
	ctx := t.Context()
	key := keys.For(dlock.DefaultPrefix, keys.KindSet, name)
	now := time.Now()
	p := rdb.TxPipeline()
	for _, m := range []string{"a", "b", "c"} {
		p.ZAdd(ctx, key.Key(), redis.Z{Member: m})
	}
	p.ZAdd(ctx, key.Part("free"), redis.Z{Member: "c"}, redis.Z{Member: "a", Score: float64(now.Add(-2 * time.Second).UnixMicro())},
		redis.Z{Member: "b", Score: float64(now.Add(-time.Second).UnixMicro())})
	p.HSet(ctx, key.Part("fences"), "a", 100, "b", 150)
	p.Set(ctx, key.Part("last"), 200, 0)
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return key
}
