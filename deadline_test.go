package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
)

// publicCall is one public call that talks to Redis.
type publicCall struct {
	name string
	call func(ctx context.Context) error
}

// callsOn lists every public call that reaches Redis on c, on locks named
// "D" (a set with member "m"), and on the leases given.
func callsOn(c *dlock.Client, leases map[string]*dlock.Lease) []publicCall {
	noop := func(context.Context) error { return nil }
	noopSet := func(context.Context, string) error { return nil }
	m, f, rw, s := c.Mutex("D"), c.FairMutex("D"), c.RWMutex("D"), c.MutexSet("D")
	return []publicCall{
		{"Mutex.TryLock", func(ctx context.Context) error { _, err := m.TryLock(ctx); return err }},
		{"Mutex.Lock", func(ctx context.Context) error { _, err := m.Lock(ctx); return err }},
		{"Mutex.Do", func(ctx context.Context) error { return m.Do(ctx, noop) }},
		{"Mutex.Status", func(ctx context.Context) error { _, err := m.Status(ctx); return err }},
		{"FairMutex.TryLock", func(ctx context.Context) error { _, err := f.TryLock(ctx); return err }},
		{"FairMutex.Lock", func(ctx context.Context) error { _, err := f.Lock(ctx); return err }},
		{"FairMutex.Do", func(ctx context.Context) error { return f.Do(ctx, noop) }},
		{"FairMutex.Status", func(ctx context.Context) error { _, err := f.Status(ctx); return err }},
		{"RWMutex.TryLock", func(ctx context.Context) error { _, err := rw.TryLock(ctx); return err }},
		{"RWMutex.Lock", func(ctx context.Context) error { _, err := rw.Lock(ctx); return err }},
		{"RWMutex.TryRLock", func(ctx context.Context) error { _, err := rw.TryRLock(ctx); return err }},
		{"RWMutex.RLock", func(ctx context.Context) error { _, err := rw.RLock(ctx); return err }},
		{"RWMutex.Do", func(ctx context.Context) error { return rw.Do(ctx, noop) }},
		{"RWMutex.RLocker.Do", func(ctx context.Context) error { return rw.RLocker().Do(ctx, noop) }},
		{"RWMutex.Status", func(ctx context.Context) error { _, err := rw.Status(ctx); return err }},
		{"MutexSet.Add", func(ctx context.Context) error { return s.Add(ctx, "n") }},
		{"MutexSet.Remove", func(ctx context.Context) error { return s.Remove(ctx, "n") }},
		{"MutexSet.TryAcquire", func(ctx context.Context) error { _, err := s.TryAcquire(ctx); return err }},
		{"MutexSet.Acquire", func(ctx context.Context) error { _, err := s.Acquire(ctx); return err }},
		{"MutexSet.TryAcquireMember", func(ctx context.Context) error { _, err := s.TryAcquireMember(ctx, "m"); return err }},
		{"MutexSet.AcquireMember", func(ctx context.Context) error { _, err := s.AcquireMember(ctx, "m"); return err }},
		{"MutexSet.Do", func(ctx context.Context) error { return s.Do(ctx, noopSet) }},
		{"MutexSet.Members", func(ctx context.Context) error { _, err := s.Members(ctx); return err }},
		{"MutexSet.Status", func(ctx context.Context) error { _, err := s.Status(ctx); return err }},
		{"MutexSet.ForceRelease", func(ctx context.Context) error { _, err := s.ForceRelease(ctx, "m"); return err }},
		{"Client.Inspect", func(ctx context.Context) error { _, err := c.Inspect(ctx, "D"); return err }},
		{"Client.List", func(ctx context.Context) error { _, err := c.List(ctx, ""); return err }},
		{"Client.ForceUnlock", func(ctx context.Context) error { _, err := c.ForceUnlock(ctx, "D"); return err }},
		{"Lease.Refresh", func(ctx context.Context) error { return leases["refresh"].Refresh(ctx, time.Minute) }},
		{"Lease.Held", func(ctx context.Context) error { _, err := leases["held"].Held(ctx); return err }},
		{"Lease.Unlock", func(ctx context.Context) error { return leases["unlock"].Unlock(ctx) }},
	}
}

// TestCallsReturnByDeadline: against a paused Redis, with go-redis'
// default options (which ignore context deadlines on reads) and with
// ContextTimeoutEnabled (where dlock leaves the deadline to go-redis),
// every public call returns an error by its ctx deadline.
func TestCallsReturnByDeadline(t *testing.T) {
	t.Parallel()
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			t.Parallel()
			callsReturnByDeadline(t, &redis.Options{ContextTimeoutEnabled: ctxTimeouts})
		})
	}
}

func callsReturnByDeadline(t *testing.T, opts *redis.Options) {
	srv := redistest.Start(t)
	opts.Addr = srv.Addr()
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	if err := c.MutexSet("D").Add(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	leases := leasesFor(t, c)
	srv.Pause(t)
	defer srv.Resume(t)
	checkReturnByDeadline(t, callsOn(c, leases))
}

// leasesFor takes a lease on c for each Lease call of callsOn.
func leasesFor(t *testing.T, c *dlock.Client) map[string]*dlock.Lease {
	t.Helper()
	leases := map[string]*dlock.Lease{}
	for _, name := range []string{"refresh", "held", "unlock"} {
		l, err := c.Mutex("lease-"+name, dlock.WithTTL(time.Minute)).Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		leases[name] = l
	}
	return leases
}

// checkReturnByDeadline calls each of calls, against a Redis that does not
// answer, with a short ctx, and fails the test unless each returns an
// error by its deadline.
func checkReturnByDeadline(t *testing.T, calls []publicCall) {
	t.Helper()
	const wait = 200 * time.Millisecond
	for _, pc := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		start := time.Now()
		err := pc.call(ctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Errorf("%s: no error from an unanswering Redis", pc.name)
		}
		if took > wait+150*time.Millisecond {
			t.Errorf("%s returned after %v, ctx deadline %v (%v)", pc.name, took, wait, err)
		}
	}
}

// TestRedlockCallsReturnByDeadline: the same on a Redlock client whose
// masters are all paused.
func TestRedlockCallsReturnByDeadline(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	var rdbs []redis.UniversalClient
	for _, s := range servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs = append(rdbs, rdb)
	}
	c := dlock.NewRedlock(rdbs)
	t.Cleanup(func() { _ = c.Close() })
	m := c.Mutex("D", dlock.WithTTL(time.Minute))
	leases := leasesFor(t, c)
	for _, s := range servers {
		s.Pause(t)
		defer s.Resume(t)
	}
	calls := []publicCall{
		{"Mutex.TryLock", func(ctx context.Context) error { _, err := m.TryLock(ctx); return err }},
		{"Mutex.Lock", func(ctx context.Context) error { _, err := m.Lock(ctx); return err }},
		{"Mutex.Status", func(ctx context.Context) error { _, err := m.Status(ctx); return err }},
		{"Lease.Refresh", func(ctx context.Context) error { return leases["refresh"].Refresh(ctx, time.Minute) }},
		{"Lease.Held", func(ctx context.Context) error { _, err := leases["held"].Held(ctx); return err }},
		{"Lease.Unlock", func(ctx context.Context) error { return leases["unlock"].Unlock(ctx) }},
	}
	checkReturnByDeadline(t, calls)
}

// TestLockReturnsByDeadlineWhileSubscribing: a Lock whose try was answered
// (the lock is held) but whose subscription connection cannot be set up
// (Redis takes no new connection) still returns by its ctx deadline.
func TestLockReturnsByDeadlineWhileSubscribing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	var dials atomic.Int32
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) > 1 { // the first connection serves the try
				addr = silent.Addr().String()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	other, _, _ := newClient(t, srv)
	if _, err := other.Mutex("m", dlock.WithTTL(time.Minute)).TryLock(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	checkReturnByDeadline(t, []publicCall{{"Mutex.Lock", func(ctx context.Context) error {
		_, err := c.Mutex("m").Lock(ctx)
		return err
	}}})
}

// TestLeaseCallsWaitForTheirTurnByDeadline: a Refresh or an Unlock that
// waits behind another call of the same lease (here a Refresh waiting for
// a paused Redis) still returns by its own ctx deadline. The Unlock that
// gave up so is carried out once that call is done, and the next Unlock
// returns what it would have: nil, or ErrLost when the lease was gone.
func TestLeaseCallsWaitForTheirTurnByDeadline(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, cnt := newClient(t, srv)
	key := keys.For(dlock.DefaultPrefix, keys.KindMutex, "turns").Key()
	const wait = 200 * time.Millisecond
	for _, gone := range []bool{false, true} {
		l := mustTake(t, ctx, c.Mutex("turns", dlock.WithTTL(time.Minute)).Lock)
		if gone {
			rdb.Del(ctx, key) // an operator's, say: the lease is lost
		}
		srv.Pause(t)
		first := behind(t, srv, cnt, func(ctx context.Context) error { return l.Refresh(ctx, time.Minute) })
		calls := []publicCall{{"Lease.Unlock", l.Unlock}}
		if !gone {
			calls = append(calls, publicCall{"Lease.Refresh", func(ctx context.Context) error { return l.Refresh(ctx, time.Minute) }})
		}
		for _, call := range calls {
			cctx, cancel := context.WithTimeout(ctx, wait)
			start := time.Now()
			err := call.call(cctx)
			took := time.Since(start)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s behind a call waiting for Redis: %v, want its ctx's deadline", call.name, err)
			}
			if took > wait+150*time.Millisecond {
				t.Errorf("%s returned after %v, ctx deadline %v", call.name, took, wait)
			}
		}
		srv.Resume(t)
		<-first
		err := eventually(ctx, 10*time.Second, func() error {
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				return errors.New("the lock is still held: the Unlock that gave up was not carried out")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The Unlock that gave up is done once the next Unlock has its turn.
		err = l.Unlock(ctx)
		switch {
		case gone && !errors.Is(err, dlock.ErrLost):
			t.Errorf("Unlock after a lost lease's release went on: %v, want ErrLost", err)
		case !gone && err != nil:
			t.Errorf("Unlock after the release went on: %v, want nil", err)
		}
	}
}

// behind runs call, with a long ctx, on a Redis that srv has paused, and
// returns once it has sent its command (counted by cnt): call then holds
// whatever it takes while it waits. The channel gives its result.
func behind(t *testing.T, srv *redistest.Server, cnt *hook, call func(context.Context) error) <-chan error {
	t.Helper()
	sent := cnt.Load()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		done <- call(ctx)
	}()
	err := eventually(t.Context(), 5*time.Second, func() error {
		if cnt.Load() == sent {
			return errors.New("the call has sent nothing")
		}
		return nil
	})
	if err != nil {
		srv.Resume(t)
		t.Fatal(err)
	}
	return done
}
