package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// event is one hook call, as a hookLog records it.
type event struct {
	hook   string // "AcquireStart", ..., "LeaseEnd"
	lock   dlock.LockInfo
	lease  dlock.LeaseInfo
	result dlock.AcquireResult
	auto   bool
	err    error
	held   time.Duration
	lost   dlock.LostReason
	trace  string // the trace value of the hook's context (see traced)
}

// traceKey carries a test's trace value in contexts, as a span would.
type traceKey struct{}

func traced(ctx context.Context, v string) context.Context {
	return context.WithValue(ctx, traceKey{}, v)
}

func traceOf(ctx context.Context) string { s, _ := ctx.Value(traceKey{}).(string); return s }

// hookLog records every hook call. Its Start hooks return a context whose
// trace value extends the one they were given with the hook's name, so a
// test can tell which context each hook and Redis call ran under.
type hookLog struct {
	mu     sync.Mutex
	events []event
}

func (r *hookLog) add(ctx context.Context, e event) {
	e.trace = traceOf(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// start records a Start hook and returns its context.
func (r *hookLog) start(ctx context.Context, e event) context.Context {
	r.add(ctx, e)
	return traced(ctx, traceOf(ctx)+"/"+e.hook)
}

func (r *hookLog) hooks() dlock.Hooks {
	return dlock.Hooks{
		AcquireStart: func(ctx context.Context, lk dlock.LockInfo) context.Context {
			return r.start(ctx, event{hook: "AcquireStart", lock: lk})
		},
		AcquireEnd: func(ctx context.Context, lk dlock.LockInfo, res dlock.AcquireResult) {
			r.add(ctx, event{hook: "AcquireEnd", lock: lk, result: res, err: res.Err})
		},
		WaitStart: func(ctx context.Context, lk dlock.LockInfo) context.Context {
			return r.start(ctx, event{hook: "WaitStart", lock: lk})
		},
		WaitEnd: func(ctx context.Context, lk dlock.LockInfo) { r.add(ctx, event{hook: "WaitEnd", lock: lk}) },
		ReleaseStart: func(ctx context.Context, l dlock.LeaseInfo) context.Context {
			return r.start(ctx, event{hook: "ReleaseStart", lease: l})
		},
		ReleaseEnd: func(ctx context.Context, l dlock.LeaseInfo, err error) {
			r.add(ctx, event{hook: "ReleaseEnd", lease: l, err: err})
		},
		RenewStart: func(ctx context.Context, l dlock.LeaseInfo, auto bool) context.Context {
			return r.start(ctx, event{hook: "RenewStart", lease: l, auto: auto})
		},
		RenewEnd: func(ctx context.Context, l dlock.LeaseInfo, err error) {
			r.add(ctx, event{hook: "RenewEnd", lease: l, err: err})
		},
		LeaseEnd: func(ctx context.Context, l dlock.LeaseInfo, held time.Duration, lost dlock.LostReason) {
			r.add(ctx, event{hook: "LeaseEnd", lease: l, held: held, lost: lost})
		},
	}
}

// take returns the events recorded so far and forgets them.
func (r *hookLog) take() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

// names lists the hooks of events, with the outcome of an AcquireEnd and
// the reason of a LeaseEnd.
func names(events []event) string {
	var s []string
	for _, e := range events {
		switch e.hook {
		case "AcquireEnd":
			s = append(s, e.hook+":"+string(e.result.Outcome))
		case "LeaseEnd":
			s = append(s, e.hook+":"+string(e.lost))
		default:
			s = append(s, e.hook)
		}
	}
	return strings.Join(s, " ")
}

// waitFor waits up to d for the hook calls recorded to include one of
// hook, and returns them all (forgetting them).
func (r *hookLog) waitFor(t *testing.T, hook string, d time.Duration) []event {
	t.Helper()
	var seen []event
	for end := time.Now().Add(d); ; {
		seen = append(seen, r.take()...)
		if slices.ContainsFunc(seen, func(e event) bool { return e.hook == hook }) {
			return seen
		}
		if time.Now().After(end) {
			t.Fatalf("no %s within %v; hooks called: %s", hook, d, names(seen))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// want fails t unless the hooks called are want, in order.
func wantHooks(t *testing.T, what string, got []event, want string) {
	t.Helper()
	if names(got) != want {
		t.Errorf("%s: hooks called\n  %s\nwant\n  %s", what, names(got), want)
	}
}

// TestHooksAcquireOutcomes runs a known sequence and checks each hook call:
// a TryLock taken and one refused, a Lock that times out, a Lock that
// waits for a release, and Unlock.
func TestHooksAcquireOutcomes(t *testing.T) {
	var log hookLog
	c, ctx := start(t, dlock.WithHooks(log.hooks()))
	m := c.Mutex("orders", dlock.WithTTL(5*time.Second))
	mutex := dlock.LockInfo{Kind: "mutex", Name: "orders"}

	held := mustTake(t, ctx, m.TryLock)
	got := log.take()
	wantHooks(t, "TryLock", got, "AcquireStart AcquireEnd:acquired")
	if r := got[1].result; r.Lease.Fence != held.Fence() || r.Lease.LockInfo != mutex || r.Err != nil || got[0].lock != mutex {
		t.Errorf("TryLock: AcquireStart %+v, AcquireEnd %+v; want lock %+v, fence %d", got[0].lock, r, mutex, held.Fence())
	}

	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while held = %v", err)
	}
	got = log.take()
	wantHooks(t, "TryLock while held", got, "AcquireStart AcquireEnd:not_acquired")
	if !errors.Is(got[1].err, dlock.ErrNotAcquired) || got[1].result.Lease != (dlock.LeaseInfo{}) {
		t.Errorf("refused TryLock: AcquireEnd %+v", got[1].result)
	}

	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := m.Lock(tctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while held = %v", err)
	}
	got = log.take()
	wantHooks(t, "Lock timing out", got, "AcquireStart WaitStart WaitEnd AcquireEnd:canceled")
	if w := got[3].result.Wait; w < 200*time.Millisecond || w > 2*time.Second {
		t.Errorf("Lock timing out after 200ms: AcquireEnd's Wait %v", w)
	}

	waited := takeAndRelease(ctx, m.Lock)
	time.Sleep(300 * time.Millisecond)
	mustUnlock(t, held)
	within(t, waited, 5*time.Second, "waiter not woken by the release")
	got = log.take()
	// The release's hooks and the waiter's interleave; each side's order
	// is fixed.
	var holder, waiter []event
	for _, e := range got {
		switch {
		case strings.HasPrefix(e.hook, "Renew"):
			// A lock handed over is renewed at once, while the waiter
			// unlocks it.
		case e.lease.Fence == held.Fence():
			holder = append(holder, e)
		default:
			waiter = append(waiter, e)
		}
	}
	wantHooks(t, "Unlock", holder, "ReleaseStart LeaseEnd: ReleaseEnd")
	wantHooks(t, "Lock waiting for the release", waiter, "AcquireStart WaitStart WaitEnd AcquireEnd:acquired ReleaseStart LeaseEnd: ReleaseEnd")
	if h := holder[1].held; h < 500*time.Millisecond || h > 5*time.Second {
		t.Errorf("LeaseEnd of a lease held about 500ms+: held %v", h)
	}
	if r := waiter[3].result; r.Wait < 300*time.Millisecond || r.Lease.Fence <= held.Fence() {
		t.Errorf("Lock that waited 300ms+: AcquireEnd %+v", r)
	}
}

// TestHooksContexts checks which context each hook and Redis call runs
// under: the acquisition's Redis calls, its wait and its lease's
// automatic renewals and end under AcquireStart's; a Refresh and an
// Unlock, and their Redis calls, under their caller's.
func TestHooksContexts(t *testing.T) {
	srv, ctx := serve(t)
	var log hookLog
	spy := &traceSpy{}
	rdb := srv.Client(t)
	rdb.AddHook(redistest.EachCommand(spy.saw))
	c := dlock.New(rdb, dlock.WithHooks(log.hooks()))
	t.Cleanup(func() { c.Close() })
	m := c.Mutex("jobs", dlock.WithTTL(300*time.Millisecond))
	// ranUnder fails t unless every script since the last call ran under
	// the context with trace value want, and one did.
	ranUnder := func(what, want string) {
		t.Helper()
		if s := spy.take(); len(s) == 0 || slices.ContainsFunc(s, func(v string) bool { return v != want }) {
			t.Errorf("%s's scripts ran under %q; want %q", what, s, want)
		}
	}

	l := mustTake(t, traced(ctx, "caller"), m.TryLock)
	ranUnder("TryLock", "caller/AcquireStart")
	got := log.waitFor(t, "RenewEnd", 2*time.Second)
	renewStart := slices.IndexFunc(got, func(e event) bool { return e.hook == "RenewStart" })
	if e := got[renewStart]; !e.auto || e.trace != "caller/AcquireStart" {
		t.Errorf("automatic RenewStart: auto %v, context %q; want true, the acquisition's", e.auto, e.trace)
	}
	if e := got[len(got)-1]; e.hook != "RenewEnd" || e.trace != "caller/AcquireStart/RenewStart" || e.err != nil {
		t.Errorf("automatic RenewEnd %+v, context %q", e, e.trace)
	}

	// A Refresh right after an automatic renewal: none is due meanwhile.
	spy.take()
	if err := l.Refresh(traced(ctx, "refresher"), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ranUnder("Refresh", "refresher/RenewStart")
	got = log.take()
	i := slices.IndexFunc(got, func(e event) bool { return e.hook == "RenewStart" && !e.auto })
	if i < 0 || got[i].trace != "refresher" {
		t.Errorf("Refresh: hooks %s; want a RenewStart with auto false under the caller's context", names(got))
	}

	if err := l.Unlock(traced(ctx, "unlocker")); err != nil {
		t.Fatal(err)
	}
	got = log.take()
	wantHooks(t, "Unlock", got, "ReleaseStart LeaseEnd: ReleaseEnd")
	for i, want := range []string{"unlocker", "caller/AcquireStart", "unlocker/ReleaseStart"} {
		if got[i].trace != want {
			t.Errorf("%s ran under %q, want %q", got[i].hook, got[i].trace, want)
		}
	}
	ranUnder("Unlock", "unlocker/ReleaseStart")
}

// traceSpy records, through redistest.EachCommand, the trace value of the
// context each script, alone or in a pipeline, is sent with.
type traceSpy struct {
	mu     sync.Mutex
	traces []string
}

func (s *traceSpy) saw(ctx context.Context, cmd redis.Cmder) {
	if isEval(cmd) {
		s.mu.Lock()
		s.traces = append(s.traces, traceOf(ctx))
		s.mu.Unlock()
	}
}

// take returns the trace values recorded and forgets them.
func (s *traceSpy) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.traces
	s.traces = nil
	return t
}

// TestHooksLostReasons loses a lease each way and checks LeaseEnd's
// reason, once, and that the Unlock after it ends nothing more.
func TestHooksLostReasons(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []dlock.LockOption
		lose func(t *testing.T, rdb *redis.Client, pause func())
		want dlock.LostReason
	}{
		{"gone", nil, func(t *testing.T, rdb *redis.Client, _ func()) {
			if err := rdb.FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}, dlock.LostGone},
		{"unreachable", nil, func(_ *testing.T, _ *redis.Client, pause func()) { pause() }, dlock.LostUnreachable},
		{"expired", []dlock.LockOption{dlock.WithAutoRefresh(false)}, func(*testing.T, *redis.Client, func()) {}, dlock.LostExpired},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, ctx := serve(t)
			var log hookLog
			cl, rdb, _ := newClient(t, srv, dlock.WithHooks(log.hooks()))
			l := mustTake(t, ctx, cl.Mutex("lost", append(c.opts, dlock.WithTTL(300*time.Millisecond))...).TryLock)
			c.lose(t, rdb, func() {
				srv.Pause(t)
				t.Cleanup(func() { srv.Resume(t) })
			})
			select {
			case <-l.Lost():
			case <-time.After(3 * time.Second):
				t.Fatal("lease not lost")
			}
			got := log.waitFor(t, "LeaseEnd", time.Second)
			if c.want == dlock.LostGone && !slices.ContainsFunc(got, func(e event) bool {
				return e.hook == "RenewEnd" && errors.Is(e.err, dlock.ErrLost)
			}) {
				t.Errorf("no RenewEnd with ErrLost before a loss Redis reported: %s", names(got))
			}
			ends := slices.DeleteFunc(got, func(e event) bool { return e.hook != "LeaseEnd" })
			if len(ends) != 1 || ends[0].lost != c.want {
				t.Fatalf("LeaseEnd calls %+v; want one, lost %q", ends, c.want)
			}
			if c.want == dlock.LostUnreachable {
				srv.Resume(t)
			}
			uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			err := l.Unlock(uctx)
			// A renewal abandoned at the loss may end meanwhile.
			got = slices.DeleteFunc(log.take(), func(e event) bool { return e.hook == "RenewEnd" })
			wantHooks(t, "Unlock after the loss", got, "ReleaseStart ReleaseEnd")
			if !errors.Is(err, dlock.ErrLost) || !errors.Is(got[1].err, dlock.ErrLost) {
				t.Errorf("Unlock after the loss = %v, ReleaseEnd's error %v; want ErrLost", err, got[1].err)
			}
		})
	}
}

// TestHooksInfo checks the LockInfo and LeaseInfo each primitive reports.
func TestHooksInfo(t *testing.T) {
	var log hookLog
	c, ctx := start(t, dlock.WithHooks(log.hooks()))
	set := c.MutexSet("pool")
	if err := set.Add(ctx, "gpu0"); err != nil {
		t.Fatal(err)
	}
	rw := c.RWMutex("table")
	for _, tc := range []struct {
		acquire func(context.Context) (*dlock.Lease, error)
		want    dlock.LeaseInfo
	}{
		{c.Mutex("a").TryLock, dlock.LeaseInfo{LockInfo: dlock.LockInfo{Kind: "mutex", Name: "a"}}},
		{c.FairMutex("a").TryLock, dlock.LeaseInfo{LockInfo: dlock.LockInfo{Kind: "fair", Name: "a"}}},
		{rw.TryRLock, dlock.LeaseInfo{LockInfo: dlock.LockInfo{Kind: "rw", Name: "table", Shared: true}}},
		{set.TryAcquire, dlock.LeaseInfo{LockInfo: dlock.LockInfo{Kind: "set", Name: "pool"}, Member: "gpu0"}},
		{func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore("s", 3).TryAcquire(ctx, 2) },
			dlock.LeaseInfo{LockInfo: dlock.LockInfo{Kind: "semaphore", Name: "s"}}},
		{func(ctx context.Context) (*dlock.Lease, error) {
			l, err := c.Election("e").TryCampaign(ctx, "me")
			if err != nil {
				return nil, err
			}
			return l.Lease, nil
		}, dlock.LeaseInfo{LockInfo: dlock.LockInfo{Kind: "election", Name: "e"}}},
	} {
		l := mustTake(t, ctx, tc.acquire)
		mustUnlock(t, l)
		tc.want.Fence = l.Fence()
		got := log.take()
		wantHooks(t, fmt.Sprint(tc.want), got, "AcquireStart AcquireEnd:acquired ReleaseStart LeaseEnd: ReleaseEnd")
		if got[0].lock != tc.want.LockInfo || got[1].result.Lease != tc.want || got[2].lease != tc.want {
			t.Errorf("hooks saw %+v, %+v, %+v; want %+v", got[0].lock, got[1].result.Lease, got[2].lease, tc.want)
		}
	}
	mustUnlock(t, mustTake(t, ctx, rw.TryLock))
	if got := log.take(); got[0].lock.Shared {
		t.Error("the write side of an RWMutex reported Shared")
	}
	if _, err := c.Mutex("").TryLock(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("TryLock of an empty name = %v", err)
	}
	wantHooks(t, "TryLock of an empty name", log.take(), "AcquireStart AcquireEnd:error")
}

// TestHooksBatchedRenewals holds several leases at once, so that their
// automatic renewals go in batches, and checks that each lease's renewal
// hooks still run under its own acquisition's context.
func TestHooksBatchedRenewals(t *testing.T) {
	var log hookLog
	c, ctx := start(t, dlock.WithHooks(log.hooks()))
	const n = 5
	for i := range n {
		name := fmt.Sprint("batch", i)
		l := mustTake(t, traced(ctx, name), c.Mutex(name, dlock.WithTTL(600*time.Millisecond)).TryLock)
		defer mustUnlock(t, l)
	}
	time.Sleep(700 * time.Millisecond)
	renewed := map[string]bool{}
	for _, e := range log.take() {
		if e.hook == "RenewEnd" {
			if e.err != nil || e.trace != e.lease.Name+"/AcquireStart/RenewStart" {
				t.Errorf("RenewEnd of %q: err %v, context %q", e.lease.Name, e.err, e.trace)
			}
			renewed[e.lease.Name] = true
		}
	}
	if len(renewed) != n {
		t.Errorf("renewal hooks ran for %d leases of %d", len(renewed), n)
	}
}

// TestHooksBadArguments checks that a bad argument of one call, not only
// a bad name, is an acquisition that ends in an error for the hooks.
func TestHooksBadArguments(t *testing.T) {
	var log hookLog
	c, ctx := start(t, dlock.WithHooks(log.hooks()))
	for what, acquire := range map[string]func() error{
		"TryAcquire(0)":          func() error { _, err := c.Semaphore("s", 2).TryAcquire(ctx, 0); return err },
		"Acquire(3) of 2":        func() error { _, err := c.Semaphore("s", 2).Acquire(ctx, 3); return err },
		"TryAcquireMember(\"\")": func() error { _, err := c.MutexSet("pool").TryAcquireMember(ctx, ""); return err },
		"AcquireMember(\"\")":    func() error { _, err := c.MutexSet("pool").AcquireMember(ctx, ""); return err },
	} {
		if err := acquire(); !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("%s = %v, want ErrInvalid", what, err)
		}
		wantHooks(t, what, log.take(), "AcquireStart AcquireEnd:error")
	}
}

// TestHooksEndBeforeAcquireEnd loses a lease between its grant and the
// return of the Lock that waited for it (a WaitEnd hook flushes Redis
// and lets the renewal find it gone): LeaseEnd still follows AcquireEnd.
func TestHooksEndBeforeAcquireEnd(t *testing.T) {
	srv, ctx := serve(t)
	var log hookLog
	h := log.hooks()
	flusher := srv.Client(t)
	h.WaitEnd = func(ctx context.Context, lk dlock.LockInfo) {
		log.add(ctx, event{hook: "WaitEnd", lock: lk})
		if err := flusher.FlushAll(context.Background()).Err(); err != nil {
			t.Error(err)
		}
		time.Sleep(400 * time.Millisecond) // the renewal, due in 100ms, finds it gone
	}
	c, _, _ := newClient(t, srv, dlock.WithHooks(h))
	m := c.FairMutex("job", dlock.WithTTL(300*time.Millisecond))
	held := mustTake(t, ctx, m.TryLock)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond)
	mustUnlock(t, held)
	l := <-got
	<-l.Lost()
	events := log.waitFor(t, "LeaseEnd", time.Second)
	var order []string
	for _, e := range events {
		if (e.hook == "AcquireEnd" || e.hook == "LeaseEnd") && (e.result.Lease.Fence == l.Fence() || e.lease.Fence == l.Fence()) {
			order = append(order, names([]event{e}))
		}
	}
	if !slices.Equal(order, []string{"AcquireEnd:acquired", "LeaseEnd:gone"}) {
		t.Errorf("the waiter's lease: %q; want AcquireEnd, then LeaseEnd", order)
	}
}

// TestHooksUnconfirmedReleases: a lease whose release never gets through
// ends as unreachable, one that never expires once its client closes, a
// Redlock lease released on fewer than a majority at once.
func TestHooksUnconfirmedReleases(t *testing.T) {
	t.Run("no expiry", func(t *testing.T) {
		srv, ctx := serve(t)
		var log hookLog
		c, _, _ := newClient(t, srv, dlock.WithHooks(log.hooks()))
		l := mustTake(t, ctx, c.Mutex("forever", dlock.WithNoExpiry()).TryLock)
		srv.Pause(t)
		defer srv.Resume(t)
		uctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := l.Unlock(uctx); err == nil {
			t.Fatal("Unlock on a paused Redis succeeded")
		}
		c.Close()
		got := log.waitFor(t, "LeaseEnd", 3*time.Second)
		if e := got[len(got)-1]; e.lost != dlock.LostUnreachable {
			t.Errorf("LeaseEnd lost %q, want unreachable", e.lost)
		}
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		var log hookLog
		c, srvs, _ := newRedlock(t, 3, dlock.WithHooks(log.hooks()))
		l := mustTake(t, t.Context(), c.Mutex("job").TryLock)
		for _, s := range srvs[1:] {
			s.Pause(t)
			defer s.Resume(t)
		}
		uctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		if err := l.Unlock(uctx); !errors.Is(err, dlock.ErrLost) {
			t.Fatalf("Unlock with 2 of 3 masters paused = %v, want ErrLost", err)
		}
		got := log.take()
		wantHooks(t, "Unlock", got, "AcquireStart AcquireEnd:acquired ReleaseStart LeaseEnd:unreachable ReleaseEnd")
	})
}

// TestRenewalRacingUnlockIsNoFailure: a renewal in flight as its lease's
// Unlock is sent finds the lease released; RenewEnd reports that as
// context.Canceled (overtaken), not ErrLost: dashboards counted a renewal
// failure per few hundred clean Unlocks.
func TestRenewalRacingUnlockIsNoFailure(t *testing.T) {
	srv, ctx := serve(t)
	var mu sync.Mutex
	goneRenewals := map[string]int{}
	released := map[string]bool{}
	key := func(l dlock.LeaseInfo) string { return fmt.Sprint(l.Name, "/", l.Fence) }
	c, _, _ := newClient(t, srv, dlock.WithHooks(dlock.Hooks{
		RenewEnd: func(_ context.Context, l dlock.LeaseInfo, err error) {
			if errors.Is(err, dlock.ErrLost) {
				mu.Lock()
				goneRenewals[key(l)]++
				mu.Unlock()
			}
		},
		LeaseEnd: func(_ context.Context, l dlock.LeaseInfo, _ time.Duration, lost dlock.LostReason) {
			if lost == "" {
				mu.Lock()
				released[key(l)] = true
				mu.Unlock()
			}
		},
	}))
	const workers, run = 100, 3 * time.Second
	end := time.Now().Add(run)
	_ = together(workers, func(i int) error {
		m := c.Mutex(fmt.Sprint("r", i), dlock.WithTTL(150*time.Millisecond))
		for time.Now().Before(end) {
			l, err := m.TryLock(ctx)
			if err != nil {
				continue // a reply later than a 150ms lease, under load: not what is measured
			}
			time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
			if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrLost) {
				t.Errorf("Unlock: %v", err) // a lease lost under load is not what is measured either
			}
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	bad := 0
	for k, n := range goneRenewals {
		if released[k] {
			bad += n
		}
	}
	if bad > 0 {
		t.Errorf("%d renewals reported the lease gone (ErrLost) of leases their Unlock released (%d released)", bad, len(released))
	}
}
