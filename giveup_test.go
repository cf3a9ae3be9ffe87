package dlock_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// acquireForm is one way to take a lock, with the options given.
type acquireForm struct {
	name  string
	block bool
	// take acquires the lock "L" (for a set, its only member) on c.
	take func(ctx context.Context, c *dlock.Client, opts ...dlock.LockOption) (*dlock.Lease, error)
	// free checks, from another client, that nothing of an acquisition
	// remains: the lock can be had at once and nobody waits for it.
	free func(ctx context.Context, c *dlock.Client) error
}

// setUp prepares the lock of a form before a test: a set needs its member.
func setUp(ctx context.Context, c *dlock.Client) error {
	return c.MutexSet("L").Add(ctx, "only")
}

func tryFree(ctx context.Context, l dlock.Locker) error {
	lease, err := l.TryLock(ctx)
	if err != nil {
		return err
	}
	return lease.Unlock(ctx)
}

func freeMutex(ctx context.Context, c *dlock.Client) error {
	return tryFree(ctx, c.Mutex("L"))
}

func freeFair(ctx context.Context, c *dlock.Client) error {
	// A fair TryLock fails while anyone is queued, too.
	return tryFree(ctx, c.FairMutex("L"))
}

func freeRW(ctx context.Context, c *dlock.Client) error {
	rw := c.RWMutex("L")
	if st, err := rw.Status(ctx); err != nil || st.WriterWaiting {
		return fmt.Errorf("status %+v, %v: want no writer waiting", st, err)
	}
	return tryFree(ctx, rw)
}

func freeSet(ctx context.Context, c *dlock.Client) error {
	lease, err := c.MutexSet("L").TryAcquire(ctx)
	if err != nil {
		return err
	}
	return lease.Unlock(ctx)
}

func freeElection(ctx context.Context, c *dlock.Client) error {
	// TryCampaign fails while anyone is queued, too.
	return tryFree(ctx, campaigner{c.Election("L")})
}

func freeSem(ctx context.Context, c *dlock.Client) error {
	// TryAcquire fails while anyone is queued, too.
	lease, err := c.Semaphore("L", 2).TryAcquire(ctx, 2)
	if err != nil {
		return err
	}
	return lease.Unlock(ctx)
}

// acquireForms are every primitive's Try and waiting forms.
var acquireForms = []acquireForm{
	{"Mutex.TryLock", false, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.Mutex("L", o...).TryLock(ctx)
	}, freeMutex},
	{"Mutex.Lock", true, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.Mutex("L", o...).Lock(ctx)
	}, freeMutex},
	{"FairMutex.TryLock", false, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.FairMutex("L", o...).TryLock(ctx)
	}, freeFair},
	{"FairMutex.Lock", true, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.FairMutex("L", o...).Lock(ctx)
	}, freeFair},
	{"RWMutex.TryLock", false, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.RWMutex("L", o...).TryLock(ctx)
	}, freeRW},
	{"RWMutex.Lock", true, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.RWMutex("L", o...).Lock(ctx)
	}, freeRW},
	{"RWMutex.TryRLock", false, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.RWMutex("L", o...).TryRLock(ctx)
	}, freeRW},
	{"RWMutex.RLock", true, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.RWMutex("L", o...).RLock(ctx)
	}, freeRW},
	{"MutexSet.TryAcquire", false, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.MutexSet("L", o...).TryAcquire(ctx)
	}, freeSet},
	{"MutexSet.Acquire", true, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.MutexSet("L", o...).Acquire(ctx)
	}, freeSet},
	{"MutexSet.TryAcquireMember", false, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.MutexSet("L", o...).TryAcquireMember(ctx, "only")
	}, freeSet},
	{"MutexSet.AcquireMember", true, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.MutexSet("L", o...).AcquireMember(ctx, "only")
	}, freeSet},
	{"Semaphore.TryAcquire", false, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.Semaphore("L", 2, o...).TryAcquire(ctx, 2)
	}, freeSem},
	{"Semaphore.Acquire", true, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return c.Semaphore("L", 2, o...).Acquire(ctx, 2)
	}, freeSem},
	{"Election.TryCampaign", false, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return leaseOf(c.Election("L", o...).TryCampaign(ctx, "v"))
	}, freeElection},
	{"Election.Campaign", true, func(ctx context.Context, c *dlock.Client, o ...dlock.LockOption) (*dlock.Lease, error) {
		return leaseOf(c.Election("L", o...).Campaign(ctx, "v"))
	}, freeElection},
}

// marker is a metadata text unique to one test, so that the proxy can
// tell the acquire script's request from every other.
func marker() string {
	return "probe-" + rand.Text()
}

// proxied returns a dlock client that reaches srv through a new proxy,
// with go-redis' retries off (a retry would resend the lost request and
// hide the fault), and a client that reaches srv directly.
func proxied(t *testing.T, srv *redistest.Server) (*redistest.Proxy, *dlock.Client, *dlock.Client) {
	return proxiedWith(t, srv, -1)
}

// proxiedRetrying is proxied with go-redis' default retries, as users
// have them.
func proxiedRetrying(t *testing.T, srv *redistest.Server) (*redistest.Proxy, *dlock.Client, *dlock.Client) {
	return proxiedWith(t, srv, 0)
}

// proxiedWith is proxied with go-redis' MaxRetries set to maxRetries.
func proxiedWith(t *testing.T, srv *redistest.Server, maxRetries int) (*redistest.Proxy, *dlock.Client, *dlock.Client) {
	t.Helper()
	p := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: maxRetries})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	other, _, _ := newClient(t, srv)
	if err := setUp(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	// Load every script, so that the request the proxy loses runs one
	// (a first EVALSHA would only get NOSCRIPT).
	for _, f := range acquireForms {
		l, err := f.take(t.Context(), other)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return p, c, other
}

// TestLostReplyLeavesNothing: when the connection breaks after Redis ran
// an acquire, a Try form reports the error and leaves nothing behind, so
// another client gets the lock at once; a waiting form tries again and
// gets the lease its first try took.
func TestLostReplyLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, f := range acquireForms {
		t.Run(f.name, func(t *testing.T) {
			p, c, other := proxied(t, srv)
			ctx := t.Context()
			probe := marker()
			dropped := p.DropReply(probe, false, nil)
			lease, err := f.take(ctx, c, dlock.WithMetadata(probe))
			select {
			case <-dropped:
			default:
				t.Fatalf("the proxy lost no reply (acquire: %v, %v)", lease, err)
			}
			if f.block {
				if err != nil {
					t.Fatalf("waiting form: %v, want the lease its first try took", err)
				}
				if held, err := lease.Held(ctx); !held || err != nil {
					t.Fatalf("Held: %v, %v", held, err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err == nil || errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("Try form: %v, want the connection's error", err)
			}
			if err := f.free(ctx, other); err != nil {
				t.Fatalf("another client, at once: %v; want the lock free", err)
			}
		})
	}
}

// TestAbandonedAcquireLeavesNothing: when ctx ends while Redis has run an
// acquire whose reply never comes, every form returns by its deadline
// and what the request took is given up: another client gets the lock
// long before its TTL.
func TestAbandonedAcquireLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const wait = 300 * time.Millisecond
	for _, f := range acquireForms {
		t.Run(f.name, func(t *testing.T) {
			p, c, other := proxied(t, srv)
			probe := marker()
			dropped := p.DropReply(probe, true, nil)
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			start := time.Now()
			_, err := f.take(ctx, c, dlock.WithMetadata(probe), dlock.WithTTL(time.Minute))
			took := time.Since(start)
			select {
			case <-dropped:
			default:
				t.Fatalf("the proxy lost no reply (acquire: %v)", err)
			}
			if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("acquire: %v, want ErrNotAcquired and DeadlineExceeded", err)
			}
			if took > wait+250*time.Millisecond {
				t.Errorf("acquire returned after %v, ctx deadline %v", took, wait)
			}
			if err := eventually(t.Context(), 2*time.Second, func() error { return f.free(t.Context(), other) }); err != nil {
				t.Fatalf("another client: %v; want the lock free long before the TTL (1m)", err)
			}
		})
	}
}

// eventually calls check until it succeeds or within passes.
func eventually(ctx context.Context, within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// loadingServer starts a server that saves its keys on demand and, when
// restarted, loads them slowly enough to answer LOADING for a while.
func loadingServer(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t, "--key-load-delay", "20000", "--loading-process-events-interval-bytes", "1024")
	admin := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	// 100 keys at 20ms each: about 2s of loading.
	for i := range 100 {
		if err := admin.Set(t.Context(), fmt.Sprintf("filler:%d", i), rand.Text()+strings.Repeat("x", 2000), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return srv, admin
}

// TestGiveUpOutlastsRestart: an acquire whose reply is lost because Redis
// died right after running it (its data saved) is given up once Redis is
// back, through refused connections and LOADING, not left for its TTL.
func TestGiveUpOutlastsRestart(t *testing.T) {
	t.Parallel()
	for _, f := range acquireForms {
		if f.block {
			continue // a waiting form retries and gets its lease: see TestLostReplyLeavesNothing
		}
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			srv, admin := loadingServer(t)
			p, c, other := proxied(t, srv)
			ctx := t.Context()
			probe := marker()
			kill, killed := make(chan struct{}), make(chan struct{})
			p.DropReply(probe, false, func() {
				close(kill)
				<-killed
			})
			done := make(chan error, 1)
			go func() {
				_, err := f.take(ctx, c, dlock.WithMetadata(probe), dlock.WithTTL(time.Minute))
				done <- err
			}()
			<-kill
			if err := admin.Save(ctx).Err(); err != nil {
				t.Error(err)
			}
			srv.Kill(t)
			close(killed)
			if err := <-done; err == nil {
				t.Fatal("acquire succeeded; want the broken connection's error")
			}
			time.Sleep(200 * time.Millisecond) // the give-up meets refused connections
			srv.Restart(t)
			restarted := time.Now()
			if err := admin.Get(ctx, "filler:0").Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
				t.Fatalf("right after the restart: %v, want LOADING", err)
			}
			if err := eventually(ctx, 20*time.Second, func() error { return f.free(ctx, other) }); err != nil {
				t.Fatalf("another client: %v; want the lock free long before the TTL (1m)", err)
			}
			t.Logf("free %v after the restart", time.Since(restarted).Round(time.Millisecond))
		})
	}
}

// TestFirstTryWaitsOutTransientErrors: a waiting form whose first try
// meets a refused connection or LOADING waits, as later tries do, until
// Redis is back; a Try form returns the error at once.
func TestFirstTryWaitsOutTransientErrors(t *testing.T) {
	t.Parallel()
	srv, admin := loadingServer(t)
	if err := admin.Save(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	c, _, _ := newClient(t, srv)
	ctx := t.Context()
	if err := setUp(ctx, c); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	for _, f := range acquireForms {
		if f.block {
			continue
		}
		// Redis stays down: a Try form that waited would end with ctx.
		tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		if _, err := f.take(tctx, c); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s with Redis down: %v, want the connection error", f.name, err)
		}
		cancel()
	}
	type outcome struct {
		name string
		err  error
	}
	results := make(chan outcome)
	n := 0
	for _, f := range acquireForms {
		if !f.block || strings.HasPrefix(f.name, "MutexSet") {
			continue // the set's keys are gone with the restart: its waiters wait for an Add
		}
		n++
		go func() {
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			l, err := f.take(lctx, c, dlock.WithTTL(5*time.Second))
			if err == nil {
				err = l.Unlock(ctx)
			}
			results <- outcome{f.name, err}
		}()
	}
	time.Sleep(300 * time.Millisecond) // every first try meets a refused connection
	srv.Restart(t)                     // then LOADING for about 2s
	for range n {
		if r := <-results; r.err != nil {
			t.Errorf("%s: %v, want the lock once Redis is back", r.name, r.err)
		}
	}
}

// TestGiveUpReportsLastError: a waiting form whose ctx ends while Redis is
// down says what the last try met.
func TestGiveUpReportsLastError(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// One dial per try, so that tries fail fast.
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	srv.Kill(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := c.Mutex("down").Lock(ctx)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "last try") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Lock: %q, want it to name the last try's error", err)
	}
}

// TestLateReplyIsNotALease: a reply that reaches the caller after the
// lease's deadline (Redis paused before it wrote the reply, or the network
// held it back) is not handed out as a lease, for Redis may already have
// let it expire: a Try form gives it up and says so, and a waiting form
// tries again, getting the lease with its TTL set anew from that try.
func TestLateReplyIsNotALease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl = 500 * time.Millisecond // declared lost 450ms after the try was sent
	for _, f := range acquireForms {
		t.Run(f.name, func(t *testing.T) {
			p, c, other := proxied(t, srv)
			ctx := t.Context()
			probe := marker()
			delivered := p.DelayReply(probe, 470*time.Millisecond)
			lease, err := f.take(ctx, c, dlock.WithMetadata(probe), dlock.WithTTL(ttl))
			select {
			case <-delivered:
			default:
				t.Fatalf("the proxy delayed no reply (acquire: %v)", err)
			}
			if !f.block {
				if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatalf("Try form: %v, want the late reply's error", err)
				}
				if err := f.free(ctx, other); err != nil {
					t.Fatalf("another client, at once: %v; want the late lease given up", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("waiting form: %v", err)
			}
			// Past the first grant's expiry: the lease lives on only if
			// the second try set its TTL anew.
			time.Sleep(300 * time.Millisecond)
			select {
			case <-lease.Lost():
				t.Fatal("lease lost: the try sent again did not renew its TTL")
			default:
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		})
	}
}

// A Lock cancelled while its try is in flight must not leave the lock held
// by a token nobody has (with WithNoExpiry, for ever).
func TestCancelledTryLeavesNoLock(t *testing.T) {
	srv := redistest.Start(t)
	for _, kind := range []string{"mutex", "fair"} {
		t.Run(kind, func(t *testing.T) {
			h := &hook{}
			c, _ := hooked(t, srv, h)
			other := dlock.New(srv.Client(t))
			defer other.Close()
			get := func(c *dlock.Client) dlock.Locker {
				if kind == "mutex" {
					return c.Mutex("leak-"+kind, dlock.WithNoExpiry())
				}
				return c.FairMutex("leak-"+kind, dlock.WithNoExpiry())
			}
			if l, err := get(c).TryLock(context.Background()); err == nil { // load the script
				l.Unlock(context.Background())
			}
			ctx, cancel := context.WithCancel(context.Background())
			h.act = lostToCancel(cancel)
			h.armed.Store(true)
			l, err := get(c).Lock(ctx)
			if err == nil {
				t.Fatalf("Lock succeeded: %v", l)
			}
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Logf("Lock error (not ErrNotAcquired): %v", err)
			}
			tctx, tcancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer tcancel()
			if _, err := get(other).Lock(tctx); err != nil {
				t.Fatalf("lock stuck after a cancelled Lock returned an error: %v", err)
			}
		})
	}
}

// TestLostReleaseReplyRetriedByGoRedis: with go-redis' default retries
// (as users have them), a lost acquire reply is sent again by go-redis
// (the try is idempotent: one lease); a release whose reply is lost
// after Redis ran it is sent again by Unlock, whose second run finds the
// lease gone, released by the first: Unlock returns nil, not ErrLost, and
// Lost() stays open (go-redis sending it again unseen made it ErrLost).
func TestLostReleaseReplyRetriedByGoRedis(t *testing.T) {
	srv := redistest.Start(t)
	for _, f := range acquireForms {
		t.Run(f.name, func(t *testing.T) {
			p, c, other := proxiedRetrying(t, srv)
			ctx := t.Context()
			probe := marker()
			dropped := p.DropReply(probe, false, nil)
			lease, err := f.take(ctx, c, dlock.WithMetadata(probe))
			<-dropped
			if err != nil {
				t.Fatalf("acquire, reply lost and retried by go-redis: %v", err)
			}
			if held, err := lease.Held(ctx); !held || err != nil {
				t.Fatalf("Held: %v, %v", held, err)
			}
			// The release names the lock's channel or keys: "L" is in
			// every request for it; arm on the lease's token instead.
			dropped = p.DropReply(lease.Token(), false, nil)
			err = lease.Unlock(ctx)
			select {
			case <-dropped:
			default:
				t.Fatalf("no reply lost (unlock: %v)", err)
			}
			lost := isClosed(lease.Lost())
			if err != nil || lost {
				t.Errorf("Unlock whose reply was lost and retried: %v, Lost() closed: %v; want nil, open", err, lost)
			}
			if err := f.free(ctx, other); err != nil {
				t.Fatalf("another client: %v; want the lock free", err)
			}
		})
	}
}

// TestReleaseNeverSentThenGoneIsLost: Unlock's first
// attempt never reaches Redis (a dial error: nothing was sent), and the
// lease is meanwhile removed (ForceUnlock here; a restart without
// persistence, a failover, alike). The second attempt's "gone" is a loss:
// ErrLost and Lost() closed, not "released by the attempt before" (a
// release is sent once: a dial error means it never reached Redis).
func TestReleaseNeverSentThenGoneIsLost(t *testing.T) {
	srv, ctx := serve(t)
	c, h := stepped(t, srv)
	other, _, _ := newClient(t, srv)
	l, err := c.Mutex("g", dlock.WithTTL(20*time.Second)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once atomic.Bool
	h.arm(l.Token(), func(_ int, _ bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if once.CompareAndSwap(false, true) {
			// Never sent: the dial failed. Meanwhile an operator frees it.
			if _, err := other.ForceUnlock(ctx, "g"); err != nil {
				t.Error(err)
			}
			cmd.SetErr(errRefused)
			return errRefused
		}
		return next(ctx, cmd)
	})
	err = l.Unlock(ctx)
	lost := isClosed(l.Lost())
	if !errors.Is(err, dlock.ErrLost) || !lost {
		t.Errorf("Unlock of a lease removed by ForceUnlock, first attempt never sent: %v, Lost() closed %v; want ErrLost, closed", err, lost)
	}
}

// TestReleaseWaitingForAConnectionThenGoneIsLost: Unlock's release waits
// for a connection from go-redis' pool (its one connection is busy with a
// BLPOP) until Unlock's ctx ends, so it is never sent; meanwhile the lease
// was removed (ForceUnlock) and another client took the lock. The next
// Unlock's "gone" is a loss, ErrLost with Lost() closed, not "released by
// the attempt before": with a ctx that dlock bounds (the release was handed
// to a worker, and Unlock stopped waiting for it) and with one go-redis
// bounds itself (ContextTimeoutEnabled: its pool wait returns ctx's error).
func TestReleaseWaitingForAConnectionThenGoneIsLost(t *testing.T) {
	srv, ctx := serve(t)
	other, _, _ := newClient(t, srv)
	for _, bounded := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", bounded), func(t *testing.T) {
			rdb := srv.Client(t, func(o *redis.Options) { o.PoolSize, o.ContextTimeoutEnabled = 1, bounded })
			c := dlock.New(rdb)
			t.Cleanup(func() { _ = c.Close() })
			name := "pooled-" + marker()
			l := mustTake(t, ctx, c.Mutex(name, dlock.WithTTL(20*time.Second)).TryLock)
			if _, err := other.ForceUnlock(ctx, name); err != nil {
				t.Fatal(err)
			}
			mustTake(t, ctx, other.Mutex(name, dlock.WithTTL(20*time.Second)).TryLock)
			busy := make(chan error, 1)
			go func() { busy <- rdb.BLPop(ctx, time.Second, "nothing-"+marker()).Err() }()
			time.Sleep(100 * time.Millisecond) // the BLPOP has the connection
			uctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err := l.Unlock(uctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Unlock whose release waited for a connection: %v, want its ctx's deadline", err)
			}
			if err := <-busy; !errors.Is(err, redis.Nil) {
				t.Fatalf("BLPOP holding the connection: %v", err)
			}
			err = l.Unlock(ctx)
			if !errors.Is(err, dlock.ErrLost) || !isClosed(l.Lost()) {
				t.Errorf("lease removed, its first release never sent: Unlock %v, Lost() closed %v; want ErrLost, closed", err, isClosed(l.Lost()))
			}
		})
	}
}

// TestGiveUpOutlivesPausedServer: Redis stalls (SIGSTOP) with a TryLock's
// request in its socket buffer, for longer than the give-up's lapse
// (max(TTL, 3s)) counted from when the caller gave up. The
// give-up's attempts get no answer meanwhile (a new connection's
// handshake is not answered), so it must keep trying until Redis answers:
// when Redis resumes and runs the abandoned try, the give-up withdraws it,
// and the lock is free long before the TTL (it stopped at the lapse, and
// the lock was held by nobody for the whole TTL).
func TestGiveUpOutlivesPausedServer(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	other, _, _ := newClient(t, srv)
	m := c.Mutex("ghost", dlock.WithTTL(time.Second))
	// Scripts loaded, one connection pooled for the try to go on.
	mustUnlock(t, mustTake(t, ctx, m.TryLock))
	const ttl = 3 * time.Second // the give-up's lapse too
	m = c.Mutex("ghost", dlock.WithTTL(ttl))
	srv.Pause(t)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := m.TryLock(tctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		srv.Resume(t)
		t.Fatalf("TryLock on a paused Redis: %v, want its deadline", err)
	}
	time.Sleep(ttl + 2*time.Second) // past the lapse
	srv.Resume(t)
	resumed := time.Now()
	// Before the abandoned try's TTL, counted from the resume, runs out.
	err = eventually(ctx, ttl-time.Second, func() error {
		l, err := other.Mutex("ghost").TryLock(ctx)
		if err == nil {
			return l.Unlock(ctx)
		}
		return err
	})
	if err != nil {
		t.Fatalf("another client %v after Redis resumed: %v; want the lock free: the acquisition that took it gave up (its TTL is %v)",
			time.Since(resumed).Round(time.Millisecond), err, ttl)
	}
}

// TestUnlockGivenUpAtCloseStillReleases: an Unlock whose ctx ends while a
// Refresh of the same lease waits for Redis returns its error and leaves
// the release to follow once that call is done; Client.Close, whose grace
// ends before that, must not drop it: the lease is still renewed (Close
// stops no renewal), and nobody else would ever get the lock.
func TestUnlockGivenUpAtCloseStillReleases(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	other, _, _ := newClient(t, srv)
	const ttl = 3 * time.Second
	l := mustTake(t, ctx, c.Mutex("forever", dlock.WithTTL(ttl)).Lock)
	srv.Pause(t)
	refreshed := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		refreshed <- l.Refresh(rctx, ttl)
	}()
	time.Sleep(50 * time.Millisecond) // the Refresh has the lease's turn
	uctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if err := l.Unlock(uctx); err == nil {
		t.Error("Unlock behind a Refresh on a paused Redis returned nil by a 50ms deadline")
	}
	cancel()
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	time.Sleep(1200 * time.Millisecond) // Close's grace (1s) has passed
	srv.Resume(t)
	<-closed
	<-refreshed
	err := eventually(ctx, 2*ttl, func() error {
		ol, err := other.Mutex("forever").TryLock(ctx)
		if err == nil {
			return ol.Unlock(ctx)
		}
		return err
	})
	if err != nil {
		t.Fatalf("another client, two TTLs after Unlock: %v; want the lock free", err)
	}
}

// giveUpGoroutines counts the give-ups running in the process (so the
// tests that read it do not run in parallel with others).
func giveUpGoroutines() int {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return bytes.Count(b.Bytes(), []byte("dlock.(*giveUps).run("))
}

// TestGiveUpsEndWhileRedisDown: Redis is gone (connections refused).
// Each failed TryLock leaves a give-up; it must end by its lapse
// (max(TTL, queue liveness) = 3s here), not live as long as the outage:
// an attempt refused at dial never reached Redis, and neither can the
// abandoned try any more. Not parallel: it counts every give-up.
func TestGiveUpsEndWhileRedisDown(t *testing.T) {
	srv, ctx := redistest.Start(t), t.Context()
	c, _, _ := newClient(t, srv)
	m := c.Mutex("down", dlock.WithTTL(100*time.Millisecond))
	mustUnlock(t, mustTake(t, ctx, m.TryLock))
	srv.Kill(t)
	for range 20 {
		if _, err := m.TryLock(ctx); err == nil {
			t.Fatal("TryLock on a dead Redis succeeded")
		}
	}
	time.Sleep(6 * time.Second) // twice the lapse
	if n := giveUpGoroutines(); n > 0 {
		t.Fatalf("%d give-ups still running 6s after their lapse of 3s began, Redis refusing connections", n)
	}
}

// TestRedlockGiveUpsEndWithPausedNode: a Redlock client with one of
// three nodes paused (a minority, which Redlock tolerates); the lock is
// held. Each refused TryLock leaves a give-up for the paused node (it
// never answered). Those must end within three lapses (max(TTL, 3s)
// each; maxLapses), not live for as long as the node is paused. Not
// parallel: it counts every give-up.
func TestRedlockGiveUpsEndWithPausedNode(t *testing.T) {
	c, srvs, _ := newRedlock(t, 3)
	ctx := t.Context()
	m := c.Mutex("paused-giveups", dlock.WithTTL(time.Second))
	h := mustTake(t, ctx, m.TryLock)
	defer h.Unlock(ctx)
	srvs[2].Pause(t)
	defer srvs[2].Resume(t)
	for range 10 {
		if _, err := m.TryLock(ctx); err == nil {
			t.Fatal("TryLock of a held lock succeeded")
		}
	}
	n0 := giveUpGoroutines()
	time.Sleep(11 * time.Second) // past 3 lapses of 3s (the cap a fix may allow)
	if n := giveUpGoroutines(); n > 0 {
		t.Fatalf("%d give-ups (of %d) still running 11s on with a node paused; their lapse is 3s", n, n0)
	}
}

// TestCancelledUnlockOfRemovedLeaseIsLost: the lease is removed
// (ForceUnlock, standing for any loss Redis knows of and the holder does
// not yet) and then Unlock is called with a ctx already cancelled (a
// deferred Unlock of a request whose client went away). go-redis sends
// nothing under a cancelled ctx, so no release ever reached Redis: the
// background release then finds the lease gone, which is a loss (as in
// TestNeverSentThenBackgroundGoneIsLost): the next Unlock must be ErrLost
// and Lost() closed.
func TestCancelledUnlockOfRemovedLeaseIsLost(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	other, _, _ := newClient(t, srv)
	l := mustTake(t, ctx, c.Mutex("cu", dlock.WithTTL(20*time.Second)).TryLock)
	if _, err := other.ForceUnlock(ctx, "cu"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := l.Unlock(cctx)
	t.Logf("Unlock(cancelled ctx) = %v", err)
	time.Sleep(500 * time.Millisecond) // the background release has run
	err = l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrLost) || !isClosed(l.Lost()) {
		t.Errorf("Unlock of a lease removed by ForceUnlock, no release ever sent: %v, Lost() closed %v; want ErrLost, closed", err, isClosed(l.Lost()))
	}
}

// TestCancelledUnlockOfFlushedRedlockLeaseIsLost: as above, on a Redlock client:
// every share is gone (FLUSHALL) before an Unlock under a cancelled ctx,
// which sends nothing.
func TestCancelledUnlockOfFlushedRedlockLeaseIsLost(t *testing.T) {
	c, srvs, _ := newRedlock(t, 3)
	ctx := t.Context()
	l := mustTake(t, ctx, c.Mutex("cu", dlock.WithTTL(20*time.Second)).TryLock)
	for _, s := range srvs {
		if err := s.Client(t).FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err := l.Unlock(cctx)
	t.Logf("Unlock(cancelled ctx) = %v", err)
	time.Sleep(500 * time.Millisecond)
	err = l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrLost) || !isClosed(l.Lost()) {
		t.Errorf("Unlock of a Redlock lease whose shares are all gone, no release ever sent: %v, Lost() closed %v; want ErrLost, closed", err, isClosed(l.Lost()))
	}
}

// TestRedlockNeverSentThenBackgroundGoneIsLost: the Redlock form of
// TestNeverSentThenBackgroundGoneIsLost: every attempt of Unlock's release
// fails at dial on every node (none reached Redis); meanwhile the shares
// vanish (FLUSHALL). The background release then finds them gone: a loss.
func TestRedlockNeverSentThenBackgroundGoneIsLost(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	h := &stepHook{}
	rdbs := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		rdb := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		rdb.AddHook(h)
		rdbs[i] = rdb
	}
	c := dlock.NewRedlock(rdbs)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	l := mustTake(t, ctx, c.Mutex("ns", dlock.WithTTL(20*time.Second)).TryLock)
	var refusing atomic.Bool
	refusing.Store(true)
	h.arm(l.Token(), func(i int, release bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if release && refusing.Load() {
			cmd.SetErr(errRefused)
			return errRefused
		}
		return next(ctx, cmd)
	})
	for _, s := range srvs {
		if err := s.Client(t).FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Unlock(ctx); err == nil {
		t.Fatal("Unlock whose every try failed at dial: nil")
	}
	refusing.Store(false)
	time.Sleep(time.Second) // the background release has run
	err := l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrLost) || !isClosed(l.Lost()) {
		t.Errorf("Unlock of a Redlock lease whose shares vanished, no release ever sent: %v, Lost() closed %v; want ErrLost, closed", err, isClosed(l.Lost()))
	}
}
