package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestLostClosesWhileUnlockHangs: an Unlock stuck on a paused Redis does
// not hold back Lost(): it closes before the lease could have expired in
// Redis, and Unlock returns by its ctx deadline, leaving the lease watched.
func TestLostClosesWhileUnlockHangs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, _, _ := newClient(t, srv)
	const ttl = time.Second
	l, err := c.Mutex("hang", dlock.WithTTL(ttl)).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	srv.Pause(t)
	defer srv.Resume(t)
	const wait = 3 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	select {
	case <-l.Lost():
		if d := time.Since(paused); d >= ttl {
			t.Errorf("Lost() closed %v after the pause; must be before the TTL %v", d, ttl)
		}
	case err := <-unlocked:
		t.Fatalf("Unlock returned %v before Lost() closed", err)
	case <-time.After(wait):
		t.Fatal("Lost() did not close while Unlock hung")
	}
	select {
	case err := <-unlocked:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Unlock: %v, want DeadlineExceeded", err)
		}
	case <-time.After(wait + 250*time.Millisecond):
		t.Errorf("Unlock did not return by its deadline (%v)", wait)
	}
	srv.Resume(t)
	if err := l.Unlock(t.Context()); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock after loss: %v, want ErrLost", err)
	}
}

// TestFailedUnlockReleasesInBackground: an Unlock that cannot reach Redis
// does not leave the lease renewed for ever (dropping it, as Do does, would
// then keep the lock held): the release goes on in the background for as
// long as the lease could live, and another client gets the lock soon
// after Redis is back, long before the TTL; a retried Unlock then reports
// success. So for a lease that never expires, and for one whose TTL a
// Refresh lengthened while Redis stays away longer than the first TTL.
func TestFailedUnlockReleasesInBackground(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opts    []dlock.LockOption
		refresh time.Duration // if set, Refresh to it after Lock
		pause   time.Duration
	}{
		{"TTL 30s", []dlock.LockOption{dlock.WithTTL(30 * time.Second)}, 0, 300 * time.Millisecond},
		{"no expiry", []dlock.LockOption{dlock.WithNoExpiry()}, 0, 300 * time.Millisecond},
		{"TTL 1s refreshed to 1m", []dlock.LockOption{dlock.WithTTL(time.Second)}, time.Minute, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c, _, _ := newClient(t, srv)
			other, _, _ := newClient(t, srv)
			l, err := c.Mutex("bg", tc.opts...).Lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if tc.refresh > 0 {
				if err := l.Refresh(t.Context(), tc.refresh); err != nil {
					t.Fatal(err)
				}
			}
			srv.Pause(t)
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			if err := l.Unlock(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Unlock against a paused Redis: %v, want DeadlineExceeded", err)
			}
			time.Sleep(tc.pause)
			srv.Resume(t)
			lctx, lcancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer lcancel()
			next, err := other.Mutex("bg").Lock(lctx)
			if err != nil {
				t.Fatalf("another client: %v; want the lock released in the background", err)
			}
			defer next.Unlock(t.Context())
			if err := l.Unlock(t.Context()); err != nil {
				t.Errorf("Unlock again after the background release: %v, want nil", err)
			}
			select {
			case <-l.Lost():
				t.Error("Lost() closed for a lease that was released")
			default:
			}
		})
	}
}

// A manual Refresh with a shorter TTL must bring the watchdog's deadline
// forward: when another client can take the lock, Lost() is closed.
func TestRefreshShorterTTLBringsLostForward(t *testing.T) {
	srv := redistest.Start(t)
	c1, _, _ := newClient(t, srv)
	c2, _, _ := newClient(t, srv)
	ctx := t.Context()
	l, err := c1.Mutex("m", dlock.WithTTL(10*time.Second), dlock.WithAutoRefresh(false)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	other, err := c2.Mutex("m").TryLock(ctx)
	if err != nil {
		t.Fatalf("other client: %v", err)
	}
	defer other.Unlock(ctx)
	select {
	case <-l.Lost():
	default:
		t.Fatalf("fence %d holds the mutex while the first lease (fence %d) has not closed Lost()", other.Fence(), l.Fence())
	}
}

// TestRefreshShorterTTLAnsweredLate: Redis applies a Refresh to a shorter
// TTL at once, but its reply is slow. Lost() must close by the shorter
// TTL counted from the Refresh's sending, before another client can take
// the lock, not when the reply comes (found by model/election.pml).
func TestRefreshShorterTTLAnsweredLate(t *testing.T) {
	srv := redistest.Start(t)
	const shorter, late = 200 * time.Millisecond, time.Second
	slow := &hook{act: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		time.Sleep(late)
		return err
	}}
	c1, _ := hooked(t, srv, slow)
	c2, _, _ := newClient(t, srv)
	ctx := t.Context()
	l, err := c1.Mutex("m", dlock.WithTTL(10*time.Second), dlock.WithAutoRefresh(false)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx, 10*time.Second); err != nil { // loads the script: the next is one EVALSHA
		t.Fatal(err)
	}
	slow.armed.Store(true)
	refreshed := make(chan error, 1)
	go func() { refreshed <- l.Refresh(ctx, shorter) }()
	defer func() { <-refreshed }()
	deadline := time.Now().Add(late / 2)
	var other *dlock.Lease
	for other == nil {
		if other, err = c2.Mutex("m").TryLock(ctx); errors.Is(err, dlock.ErrNotAcquired) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		} else if err != nil {
			t.Fatalf("other client: %v (the refresh to %v should have let the lock go by now)", err, shorter)
		}
	}
	defer other.Unlock(ctx)
	select {
	case <-l.Lost():
	default:
		t.Fatalf("fence %d holds the mutex while the first lease (fence %d), refreshed to %v and waiting for the reply, has not closed Lost()",
			other.Fence(), l.Fence(), shorter)
	}
}

// flushInside is the body of a Do: it flushes Redis under the lease and
// checks that its ctx is cancelled with cause ErrLost within ttl.
func flushInside(t *testing.T, rdb *redis.Client, ttl time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		flushed := time.Now()
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrLost) {
				t.Errorf("cause = %v, want ErrLost", cause)
			}
			if d := time.Since(flushed); d > ttl {
				t.Errorf("loss noticed %v after the flush; TTL %v", d, ttl)
			}
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("Do's context not cancelled after the keys vanished")
		}
	}
}

// TestLostOnFlush: the holder's keys vanish; Lost() closes and Do's
// context is cancelled with cause ErrLost, within the TTL.
func TestLostOnFlush(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	const ttl = 900 * time.Millisecond
	err := c.Mutex("flush", dlock.WithTTL(ttl)).Do(ctx, flushInside(t, rdb, ttl))
	if !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Do = %v, want the unlock's ErrLost", err)
	}
}

// TestLostWhenRedisPauses: Redis stops answering (SIGSTOP). Lost() must
// close before the lease could have expired on the server: at most TTL
// after the pause, since the last successful renewal came before it.
func TestLostWhenRedisPauses(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	const ttl = 1200 * time.Millisecond
	l := mustTake(t, ctx, c.Mutex("pause", dlock.WithTTL(ttl)).Lock)
	time.Sleep(ttl / 2) // let a renewal happen first
	paused := time.Now()
	srv.Pause(t)
	defer srv.Resume(t)
	select {
	case <-l.Lost():
		if d := time.Since(paused); d >= ttl {
			t.Errorf("Lost() closed %v after the pause; must be before the TTL %v", d, ttl)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() did not close while Redis was paused")
	}
	srv.Resume(t)
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock after loss: %v, want ErrLost", err)
	}
}

// TestRenewalKeepsLease: with auto-refresh a lease outlives its TTL many
// times over, and a second holder never gets in.
func TestRenewalKeepsLease(t *testing.T) {
	c, ctx := start(t)
	m := c.Mutex("renew", dlock.WithTTL(time.Second))
	l := mustTake(t, ctx, m.Lock)
	tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := m.Lock(tctx); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Lock = %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	select {
	case <-l.Lost():
		t.Fatal("renewed lease reported lost")
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestManualRefresh(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	m := c.Mutex("manual", dlock.WithTTL(time.Second), dlock.WithAutoRefresh(false))
	l := mustTake(t, ctx, m.Lock)
	for range 4 {
		time.Sleep(400 * time.Millisecond)
		if err := l.Refresh(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-l.Lost():
		t.Fatal("refreshed lease reported lost")
	default:
	}
	rdb.FlushAll(ctx)
	if err := l.Refresh(ctx, time.Second); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Refresh after flush: %v, want ErrLost", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost() open after Refresh found the lease gone")
	}
}

// TestLongestTTL: a TTL of math.MaxInt64 ns (292 years, a common "for
// ever") is a TTL like any other. Rounded up to whole ms it overflowed to
// a negative expiry: Refresh returned nil and Redis dropped the lease, so
// a second caller got the lock while the first's Lost() stayed open.
func TestLongestTTL(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	const forever = time.Duration(math.MaxInt64)
	m := c.Mutex("forever", dlock.WithTTL(forever))
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with a TTL of %v: %v", forever, err)
	}
	short := c.Mutex("refreshed", dlock.WithTTL(time.Minute))
	r := mustTake(t, ctx, short.TryLock)
	if err := r.Refresh(ctx, forever); err != nil {
		t.Fatalf("Refresh to %v: %v", forever, err)
	}
	sem := c.Semaphore("forever", 1, dlock.WithTTL(forever))
	s, err := sem.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("Semaphore.TryAcquire with a TTL of %v: %v", forever, err)
	}
	for name, try := range map[string]func() error{
		"Mutex":     func() error { _, err := m.TryLock(ctx); return err },
		"refreshed": func() error { _, err := short.TryLock(ctx); return err },
		"Semaphore": func() error { _, err := sem.TryAcquire(ctx, 1); return err },
	} {
		if err := try(); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s held for %v: a second caller got %v, want ErrNotAcquired", name, forever, err)
		}
	}
	// Status shows the longest Duration, not a product that overflowed
	// to minus 292 years (read as "never expires" by the command).
	for name, status := range map[string]func(context.Context) (dlock.Status, error){"Mutex": m.Status, "Semaphore": sem.Status} {
		st, err := status(ctx)
		if err != nil || st.TTL < forever-time.Hour {
			t.Errorf("%s held for %v: Status TTL %v (%v); want about %v", name, forever, st.TTL, err, forever)
		}
		for _, h := range st.Holders {
			if h.TTL < forever-time.Hour {
				t.Errorf("%s held for %v: a holder's TTL %v; want about %v", name, forever, h.TTL, forever)
			}
		}
	}
	mustUnlock(t, l, r, s)
}

// TestNilLeaseAndOptions: the lease of a failed acquisition, used
// unchecked (a deferred Unlock), and nil options, are ErrInvalid or
// ignored, not panics.
func TestNilLeaseAndOptions(t *testing.T) {
	srv, ctx := serve(t)
	var l *dlock.Lease
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Unlock of a nil lease: %v, want ErrInvalid", err)
	}
	if err := l.Refresh(ctx, time.Second); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Refresh of a nil lease: %v, want ErrInvalid", err)
	}
	if _, err := l.Held(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Held of a nil lease: %v, want ErrInvalid", err)
	}
	c := dlock.New(srv.Client(t), nil)
	defer c.Close()
	mustUnlock(t, mustTake(t, ctx, c.Mutex("nil-option", nil).TryLock))
}

// TestUnlockAfterCloseWaitingForItsTurn: an Unlock on a closed client
// whose ctx ends while a Refresh holds the lease's turn still releases
// the lease once the Refresh is done: the closed client runs no give-ups,
// and the lease, renewed on, kept the lock for good.
func TestUnlockAfterCloseWaitingForItsTurn(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	other, _, _ := newClient(t, srv)
	const ttl = time.Second
	l := mustTake(t, ctx, c.Mutex("closed-turn", dlock.WithTTL(ttl)).Lock)
	c.Close()
	srv.Pause(t)
	refreshed := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		refreshed <- l.Refresh(rctx, ttl)
	}()
	time.Sleep(50 * time.Millisecond) // the Refresh has the turn
	uctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := l.Unlock(uctx); err == nil {
		t.Fatal("Unlock behind a Refresh on a paused Redis: nil, want its ctx's error")
	}
	srv.Resume(t)
	<-refreshed
	if err := eventually(ctx, 3*ttl, func() error {
		l, err := other.Mutex("closed-turn").TryLock(ctx)
		if err == nil {
			return l.Unlock(ctx)
		}
		return err
	}); err != nil {
		t.Fatalf("the lock is still held after the Unlock, 3 TTLs on: %v", err)
	}
}

// TestLongerRefreshAfterLostReplyKeepsLease: a Refresh whose reply was
// lost (Redis may have applied it), then a
// Refresh to a longer TTL that succeeds: the lease is held in Redis for
// that longer TTL, and stays held while the watchdog renews it. Lost()
// must not close, nor Do's context be cancelled.
func TestLongerRefreshAfterLostReplyKeepsLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := &hook{}
	c, _ := hooked(t, srv, h)
	l, err := c.Mutex("review-renew", dlock.WithTTL(time.Second)).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	// The next script call (the Refresh) runs in Redis, and its reply is lost.
	h.act = func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		_ = next(ctx, cmd)
		err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
		cmd.SetErr(err)
		return err
	}
	h.armed.Store(true)
	if err := l.Refresh(t.Context(), time.Second); err == nil {
		t.Fatal("Refresh with its reply lost returned nil")
	}
	if err := l.Refresh(t.Context(), time.Minute); err != nil {
		t.Fatalf("Refresh to a minute: %v", err)
	}
	refreshed := time.Now()
	select {
	case <-l.Lost():
		pttl, _ := srv.Client(t).PTTL(t.Context(), "dlock:{review-renew}:mutex").Result()
		t.Fatalf("Lost() closed %v after a successful Refresh to 1m (Redis' PTTL of the lock then: %v)",
			time.Since(refreshed).Round(time.Millisecond), pttl)
	case <-time.After(2 * time.Second):
	}
	if ok, err := l.Held(t.Context()); !ok || err != nil {
		t.Errorf("Held: %v, %v", ok, err)
	}
}

// TestRefreshAfterUnlockIsErrLost: a Refresh after the lease's own Unlock
// is ErrLost (DESIGN: "ErrLost if no longer ours"), and ErrInvalid as any
// call after Unlock, with Lost() left open (Unlock is no loss); a second
// Unlock stays ErrInvalid only (a deferred Unlock after an explicit one
// must not read as a loss).
func TestRefreshAfterUnlockIsErrLost(t *testing.T) {
	c, ctx := start(t)
	l := mustTake(t, ctx, c.Mutex("done").TryLock)
	mustUnlock(t, l)
	if err := l.Refresh(ctx, time.Second); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Refresh after Unlock: %v, want ErrLost and ErrInvalid", err)
	}
	if err := l.Unlock(ctx); errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("second Unlock: %v, want ErrInvalid, not ErrLost", err)
	}
	select {
	case <-l.Lost():
		t.Error("Lost() closed after Unlock and a Refresh")
	default:
	}
}

// TestLostAskedBeforeOrAfterTheLoss: Lost()'s channel is made at its
// first call; asked before the loss it closes at the loss, asked only
// after it is closed already, and every call gives one channel.
func TestLostAskedBeforeOrAfterTheLoss(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	before := mustTake(t, ctx, c.Mutex("lost-before").TryLock)
	after := mustTake(t, ctx, c.Mutex("lost-after").TryLock)
	asked := before.Lost()
	if isClosed(asked) {
		t.Fatal("Lost() closed while the lease is held")
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*dlock.Lease{before, after} {
		if err := l.Refresh(ctx, time.Second); !errors.Is(err, dlock.ErrLost) {
			t.Fatalf("Refresh of %s after FLUSHALL: %v, want ErrLost", l.Name(), err)
		}
	}
	if !isClosed(asked) || asked != before.Lost() {
		t.Errorf("Lost() asked before the loss: closed %v, the same channel after %v; want both", isClosed(asked), asked == before.Lost())
	}
	if first := after.Lost(); !isClosed(first) || first != after.Lost() {
		t.Errorf("Lost() asked only after the loss: closed %v, one channel %v; want both", isClosed(first), first == after.Lost())
	}
}

// TestRefreshAfterFailedUnlock: Unlock's release runs in Redis but
// its ctx ends before the reply, so that Unlock stops waiting for it (the
// release goes on in the background).
// A Refresh then is a call after Unlock: ErrLost+ErrInvalid, Lost() open
// (as Proclaim after a Resign in the background is ErrLost); and the next
// Unlock is nil (the release happened).
func TestRefreshAfterFailedUnlock(t *testing.T) {
	srv, ctx := serve(t)
	c, h := stepped(t, srv)
	// Scripts loaded, so that the release below runs at its first EVALSHA.
	mustUnlock(t, mustTake(t, ctx, c.Mutex("rf", dlock.WithTTL(5*time.Second)).TryLock))
	l := mustTake(t, ctx, c.Mutex("rf", dlock.WithTTL(5*time.Second)).TryLock)
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.arm(l.Token(), func(i int, release bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if release && i == 0 {
			err := next(context.Background(), cmd) // runs
			cancel()                               // the caller's ctx ends before the reply is read
			time.Sleep(100 * time.Millisecond)
			return err
		}
		if release {
			time.Sleep(300 * time.Millisecond) // the background release is slow
		}
		return next(ctx, cmd)
	})
	if err := l.Unlock(uctx); err == nil {
		t.Fatal("Unlock whose ctx ended: nil")
	}
	err := l.Refresh(ctx, 5*time.Second)
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrInvalid) || isClosed(l.Lost()) {
		t.Errorf("Refresh after a failed Unlock: %v, Lost() closed %v; want ErrLost+ErrInvalid, open", err, isClosed(l.Lost()))
	}
	time.Sleep(time.Second)
	if err := l.Unlock(ctx); err != nil || isClosed(l.Lost()) {
		t.Errorf("Unlock after the background release: %v, Lost() closed %v; want nil, open", err, isClosed(l.Lost()))
	}
}

// TestNeverSentThenBackgroundGoneIsLost: every attempt of Unlock's release
// fails at dial (none reached Redis); meanwhile an operator removes the
// lease. The background release then finds it gone: that is a loss, as in
// TestReleaseNeverSentThenGoneIsLost, not a release.
func TestNeverSentThenBackgroundGoneIsLost(t *testing.T) {
	srv, ctx := serve(t)
	c, h := stepped(t, srv)
	other, _, _ := newClient(t, srv)
	l := mustTake(t, ctx, c.Mutex("ns", dlock.WithTTL(20*time.Second)).TryLock)
	var forced atomic.Bool
	h.arm(l.Token(), func(i int, release bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if release && i < 4 { // Unlock's four tries: never sent
			if forced.CompareAndSwap(false, true) {
				if _, err := other.ForceUnlock(ctx, "ns"); err != nil {
					t.Error(err)
				}
			}
			cmd.SetErr(errRefused)
			return errRefused
		}
		return next(ctx, cmd)
	})
	if err := l.Unlock(ctx); err == nil {
		t.Fatal("Unlock whose every try failed at dial: nil")
	}
	time.Sleep(500 * time.Millisecond) // the background release has run
	err := l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrLost) || !isClosed(l.Lost()) {
		t.Errorf("Unlock of a lease removed by ForceUnlock, no release ever sent: %v, Lost() closed %v; want ErrLost, closed", err, isClosed(l.Lost()))
	}
}

// TestRefreshAfterFailedUnlockRenewsNothing: Unlock's release never
// reaches Redis (dial errors); the release goes on in the background and
// the lease is "no longer renewed". A Refresh then must not renew it.
func TestRefreshAfterFailedUnlockRenewsNothing(t *testing.T) {
	srv, ctx := serve(t)
	c, h := stepped(t, srv)
	l := mustTake(t, ctx, c.Mutex("rn", dlock.WithTTL(2*time.Second)).TryLock)
	h.arm(l.Token(), func(i int, release bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if release && i < 4 {
			cmd.SetErr(errRefused)
			return errRefused
		}
		if release {
			time.Sleep(time.Second) // the background release comes late
		}
		return next(ctx, cmd)
	})
	if err := l.Unlock(ctx); err == nil {
		t.Fatal("Unlock whose every try failed at dial: nil")
	}
	err := l.Refresh(ctx, time.Minute)
	pttl := srv.Client(t).PTTL(ctx, "dlock:{rn}:mutex").Val()
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrInvalid) || pttl > 2*time.Second {
		t.Errorf("Refresh to 1m after a failed Unlock: %v, lock's PTTL then %v; want ErrLost+ErrInvalid, not renewed", err, pttl)
	}
}

// delayHook holds back each command that names a token in target until
// the time given for it.
type delayHook struct {
	mu     sync.Mutex
	target map[string]time.Time
}

func (h *delayHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		var at time.Time
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok {
				if t, ok := h.target[s]; ok {
					at = t
				}
			}
		}
		h.mu.Unlock()
		if !at.IsZero() {
			time.Sleep(time.Until(at))
		}
		return next(ctx, cmd)
	}
}

// TestUnlockReplyAtDeadline: the release's reply comes right at the
// lease's deadline. Whatever Unlock returns, Lost() must not close after
// an Unlock that returned nil.
func TestUnlockReplyAtDeadline(t *testing.T) {
	srv, ctx := serve(t)
	h := &delayHook{target: map[string]time.Time{}}
	rdb := srv.Client(t)
	rdb.AddHook(h)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	mustUnlock(t, mustTake(t, ctx, c.Mutex("warm", dlock.WithTTL(time.Second)).TryLock))
	// The release's reply comes a round trip after it is sent: aim the
	// sends a round trip before the deadline (the median of a few PINGs),
	// spread by 3ms each way, so that the replies straddle it.
	rtts := make([]time.Duration, 21)
	for i := range rtts {
		start := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	rtt := rtts[len(rtts)/2]
	const n = 300
	var nilThenLost, lostErr, nils atomic.Int32
	_ = together(n, func(i int) error {
		m := c.Mutex(fmt.Sprintf("dl-%d", i), dlock.WithTTL(time.Second), dlock.WithAutoRefresh(false))
		t0 := time.Now()
		l, err := m.TryLock(ctx)
		if err != nil {
			t.Error(err)
			return nil
		}
		// deadline = sent + 900ms (TTL 1s, margin 100ms)
		d := time.Duration(i-n/2)*20*time.Microsecond - rtt
		h.mu.Lock()
		h.target[l.Token()] = t0.Add(900*time.Millisecond + d)
		h.mu.Unlock()
		err = l.Unlock(ctx)
		time.Sleep(100 * time.Millisecond)
		switch {
		case err == nil && isClosed(l.Lost()):
			nilThenLost.Add(1)
		case err == nil:
			nils.Add(1)
		case errors.Is(err, dlock.ErrLost):
			lostErr.Add(1)
		}
		return nil
	})
	t.Logf("nil=%d ErrLost=%d nil-then-Lost()-closed=%d", nils.Load(), lostErr.Load(), nilThenLost.Load())
	if nilThenLost.Load() > 0 {
		t.Errorf("%d Unlocks returned nil and Lost() closed afterwards", nilThenLost.Load())
	}
}

// TestHungRefreshLostReason: a Refresh whose reply never comes ends with
// the lease's deadline; the loss is reported unreachable, the cause the
// watchdog found, not gone (Refresh read its ErrStopped as a loss Redis
// told of, when it came before the watchdog had told its own).
func TestHungRefreshLostReason(t *testing.T) {
	srv, ctx := serve(t)
	reasons := make(chan dlock.LostReason, 1)
	c, h := stepped(t, srv, dlock.WithHooks(dlock.Hooks{LeaseEnd: func(_ context.Context, _ dlock.LeaseInfo, _ time.Duration, lost dlock.LostReason) {
		reasons <- lost
	}}))
	m := c.Mutex("hung", dlock.WithTTL(100*time.Millisecond), dlock.WithAutoRefresh(false))
	const n = 100
	got := map[dlock.LostReason]int{}
	for i := range n {
		l := mustTake(t, ctx, m.TryLock)
		block := make(chan struct{})
		h.arm(l.Token(), func(_ int, release bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if !release {
				<-block // unanswered, whatever the context says
				cmd.SetErr(context.DeadlineExceeded)
				return context.DeadlineExceeded
			}
			return next(ctx, cmd)
		})
		if err := l.Refresh(ctx, 100*time.Millisecond); !errors.Is(err, dlock.ErrLost) {
			t.Fatalf("iteration %d: Refresh: %v, want ErrLost", i, err)
		}
		got[<-reasons]++
		close(block)
		h.arm("", nil)
		_ = l.Unlock(ctx)
	}
	if got[dlock.LostUnreachable] != n {
		t.Errorf("LeaseEnd's reasons over %d hung Refreshes: %v; want all %q", n, got, dlock.LostUnreachable)
	}
}

// staleAfter fails the test unless the request the proxy held back
// (held) reaches Redis only now, after the longer Refresh: the case the
// test is about.
func staleAfter(t *testing.T, held <-chan struct{}) {
	t.Helper()
	select {
	case <-held:
		t.Fatal("the held-back write reached Redis before the longer Refresh returned")
	default:
	}
	<-held
}

// heldOrLost waits up to 2s for another client to take name; when one
// does, the first holder's lease must have been told it is lost. (If none
// does, the holder has kept renewing its lease after the stale write.)
func heldOrLost(t *testing.T, ctx context.Context, other *dlock.Client, name string, l *dlock.Lease) {
	t.Helper()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if l2, err := other.Mutex(name).TryLock(ctx); err == nil {
			if !isClosed(l.Lost()) {
				t.Fatalf("two holders: another client took %q (fence %d) while its holder's Lost() is open", name, l2.Fence())
			}
			return
		}
	}
	l.Unlock(ctx)
}

// TestStaleRenewalAfterLongerRefresh: an automatic renewal (TTL 300ms)
// reaches Redis 400ms late, over its own connection; meanwhile the
// watchdog gave up waiting for it, renewed again and a Refresh made the
// TTL 10s. When the stale renewal lands it ends the lease 300ms later:
// the holder must count with it (it believed the lease good for 10s, and
// another client took the lock).
func TestStaleRenewalAfterLongerRefresh(t *testing.T) {
	srv, ctx := serve(t)
	p, a, b := proxiedRetrying(t, srv)
	l, err := a.Mutex("x", dlock.WithTTL(300*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := p.DelayRequest("evalsha", 400*time.Millisecond) // the first renewal, due at 100ms
	time.Sleep(250 * time.Millisecond)                      // given up at 200ms, sent again
	if err := l.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	staleAfter(t, held)
	heldOrLost(t, ctx, b, "x", l)
}

// TestStaleRefreshAfterLongerRefresh: as above, with a Refresh to 300ms
// whose ctx ended before it reached Redis, then a Refresh to 10s.
func TestStaleRefreshAfterLongerRefresh(t *testing.T) {
	srv, ctx := serve(t)
	p := redistest.StartProxy(t, srv.Addr())
	// A client whose ctx ends its exchange, so the second Refresh is not
	// queued behind the first (see Refresh) but sent on another connection.
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	a := dlock.New(rdb)
	t.Cleanup(func() { _ = a.Close() })
	b, _, _ := newClient(t, srv)
	mustUnlock(t, mustTake(t, ctx, a.Mutex("warm").TryLock)) // the scripts loaded: the held request runs one
	l, err := a.Mutex("x", dlock.WithTTL(10*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := p.DelayRequest("evalsha", 600*time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if err := l.Refresh(short, 300*time.Millisecond); err == nil {
		t.Fatal("Refresh held back 600ms returned nil within 100ms")
	}
	cancel()
	time.Sleep(50 * time.Millisecond)
	if err := l.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatalf("Refresh(10s): %v", err)
	}
	staleAfter(t, held)
	heldOrLost(t, ctx, b, "x", l)
}

// TestBackgroundReleaseOutlastsAShorterRefresh: after a Refresh to a
// shorter TTL that never reached Redis (a partition), a failed Unlock
// retries its release in the background for as long as Redis may keep the
// lease (the TTL last applied, the longer), not for the shorter TTL asked:
// once the partition heals, the lock is freed, not held by nobody for the
// rest of the longer TTL.
func TestBackgroundReleaseOutlastsAShorterRefresh(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p, c, other := proxied(t, srv)
	ctx := t.Context()
	const ttl = 40 * time.Second
	l := mustTake(t, ctx, c.Mutex("L", dlock.WithTTL(ttl)).TryLock)
	p.Cut(true)
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := l.Refresh(rctx, time.Second)
	cancel()
	if err == nil || errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Refresh across a partition: %v, want a network error", err)
	}
	t.Logf("Refresh: %v; Lost() closed before Unlock: %v", err, isClosed(l.Lost()))
	uctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = l.Unlock(uctx)
	cancel()
	if err == nil {
		t.Fatal("Unlock across a partition succeeded")
	}
	t.Logf("Unlock: %v", err)
	// The lease is dropped here, as Do drops it after a failed Unlock.
	time.Sleep(4 * time.Second) // the partition lasts a few seconds
	p.Cut(false)
	healed := time.Now()
	if err := eventually(ctx, 5*time.Second, func() error { return freeMutex(ctx, other) }); err != nil {
		st, _ := other.Mutex("L").Status(ctx)
		t.Fatalf("another client %v after the partition healed: %v (lock still held, TTL left %v of %v); "+
			"the background release gave up while Redis still kept the lease", time.Since(healed).Round(time.Second), err, st.TTL.Round(time.Second), ttl)
	}
}

// TestUnlockAfterLostRedisDownIsErrLost: Unlock's documented contract
// is "ErrLost if the lease was lost before ... it ran (Lost() was
// closed)", also when Redis cannot be reached for the release.
func TestUnlockAfterLostRedisDownIsErrLost(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	l := mustTake(t, ctx, c.Mutex("down", dlock.WithTTL(time.Second)).TryLock)
	srv.Kill(t)
	select {
	case <-l.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("Lost() not closed 3s after Redis died (TTL 1s)")
	}
	uctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := l.Unlock(uctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock of a lease whose Lost() had closed: %v; want ErrLost", err)
	}
}

// TestDoLostRedisDownIsErrLost: Do's function sees its context cancelled
// with cause ErrLost when Redis dies, and Do, whose release then fails,
// returns an error matching ErrLost.
func TestDoLostRedisDownIsErrLost(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	err := c.Mutex("dodown", dlock.WithTTL(time.Second)).Do(ctx, func(fctx context.Context) error {
		srv.Kill(t)
		select {
		case <-fctx.Done():
		case <-time.After(3 * time.Second):
			t.Error("Do's context not cancelled 3s after Redis died (TTL 1s)")
		}
		return nil // the work itself succeeded
	})
	if !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Do after its lease was lost: %v; want an error matching ErrLost", err)
	}
}

// TestUnlockAfterLostReleasesInBackground: Redis stalls (SIGSTOP)
// for longer than the lease's TTL, so Lost() closes; the renewal the
// watchdog sent during the stall is applied when Redis resumes, keeping
// the lease for a whole TTL more. An Unlock that then cannot send its
// release (its ctx has ended, as a request's ctx often has by the time a
// deferred Unlock runs) releases in the background, as an Unlock of a
// lease not known lost does: the lock is not held by nobody for a TTL.
func TestUnlockAfterLostReleasesInBackground(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	other, _, _ := newClient(t, srv)
	const ttl = 6 * time.Second
	// Warm up: Redis loads the renewal script, as on any client that has
	// held a lease for a third of its TTL.
	warm := mustTake(t, ctx, c.Mutex("warm", dlock.WithTTL(90*time.Millisecond)).TryLock)
	time.Sleep(200 * time.Millisecond)
	mustUnlock(t, warm)
	l := mustTake(t, ctx, c.Mutex("stall", dlock.WithTTL(ttl)).TryLock)
	srv.Pause(t)
	select {
	case <-l.Lost():
	case <-time.After(ttl + time.Second):
		srv.Resume(t)
		t.Fatal("Lost() not closed while Redis was stopped for longer than the TTL")
	}
	srv.Resume(t)                      // before Redis' copy expires: Lost() closes a margin (600ms) earlier
	time.Sleep(100 * time.Millisecond) // Redis runs what it had read
	if st, err := other.Mutex("stall").Status(ctx); true {
		t.Logf("after resume: %+v %v", st, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := l.Unlock(cctx)
	t.Logf("Unlock: %v", err)
	start := time.Now()
	if err := eventually(ctx, 2*time.Second, func() error { return tryFree(ctx, other.Mutex("stall")) }); err != nil {
		st, _ := other.Mutex("stall").Status(ctx)
		t.Fatalf("another client, %v after the Unlock: %v (held %v, TTL left %v): no release was sent, in the foreground or the background",
			time.Since(start).Round(time.Second), err, st.Held, st.TTL.Round(100*time.Millisecond))
	}
	t.Logf("free after %v", time.Since(start))
}

// TestHungRefreshHoldsBackNoRenewal: one connection hangs (the
// proxy drops the reply to a Refresh and keeps the connection silent);
// Redis stays reachable over every other connection. The Refresh returns
// at its ctx deadline; the watchdog stops waiting for that renewal a
// third of the way to the lease's deadline (go-redis would wait its
// ReadTimeout, 5s by default) and renews on another connection, as it
// does for a hung automatic renewal: the lease lives.
func TestHungRefreshHoldsBackNoRenewal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p, c, other := proxiedRetrying(t, srv)
	ctx := t.Context()
	name := marker()
	const ttl = 2 * time.Second
	l := mustTake(t, ctx, c.Mutex(name, dlock.WithTTL(ttl)).TryLock)
	dropped := p.DropReply(name, true, nil)
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := l.Refresh(rctx, ttl)
	cancel()
	select {
	case <-dropped:
	default:
		t.Fatalf("the Refresh's reply was not dropped (Refresh: %v)", err)
	}
	t.Logf("Refresh on the hung connection: %v", err)
	// Redis answers everyone else.
	if err := tryFree(ctx, other.Mutex("unrelated")); err != nil {
		t.Fatal(err)
	}
	rctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	err = l.Refresh(rctx, ttl)
	cancel()
	t.Logf("second Refresh: %v", err)
	select {
	case <-l.Lost():
		h, herr := l.Held(ctx)
		t.Errorf("Lost() closed within a lease of TTL %v on a reachable Redis (Held: %v, %v): "+
			"the hung Refresh held back every renewal", ttl, h, herr)
	case <-time.After(2 * ttl):
	}
	_ = l.Unlock(ctx)
}
