package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// exampleAddr is the address of the redis-server that Example functions
// use; TestMain starts it.
var exampleAddr string

// redlockAddrs are three independent redis-servers for the Redlock
// example; TestMain starts them.
var redlockAddrs []string

func TestMain(m *testing.M) {
	if helper := os.Getenv(helperEnv); helper != "" {
		os.Exit(runHelper(helper))
	}
	srv, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlock tests need redis-server:", err)
		os.Exit(1)
	}
	exampleAddr = srv.Addr()
	var masters []*redistest.Server
	for range 3 {
		s, err := redistest.StartMain()
		if err != nil {
			fmt.Fprintln(os.Stderr, "dlock tests need redis-server:", err)
			os.Exit(1)
		}
		masters = append(masters, s)
		redlockAddrs = append(redlockAddrs, s.Addr())
	}
	code := m.Run()
	srv.Stop()
	for _, s := range masters {
		s.Stop()
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newClient returns a dlock client on srv, with its own go-redis client
// whose commands are counted. Both are closed in t.Cleanup.
func newClient(t testing.TB, srv *redistest.Server, opts ...dlock.Option) (*dlock.Client, *redis.Client, *hook) {
	t.Helper()
	cnt := &hook{}
	c, rdb := hooked(t, srv, cnt, opts...)
	return c, rdb, cnt
}

// hooked gives a Client on srv whose commands pass h, and the go-redis
// client under it; t closes both.
func hooked(t testing.TB, srv *redistest.Server, h *hook, opts ...dlock.Option) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := srv.Client(t)
	rdb.AddHook(h)
	c := dlock.New(rdb, opts...)
	t.Cleanup(func() { c.Close() })
	return c, rdb
}

// handOff releases held after pause while wait waits for the same lock,
// and fails t unless wait then takes it (and unlocks it) within 5s: long
// before any lease these tests hold would run out.
func handOff(t *testing.T, ctx context.Context, held *dlock.Lease, wait func(context.Context) (*dlock.Lease, error), pause time.Duration) {
	t.Helper()
	handOffAfter(t, ctx, held, wait, func() { time.Sleep(pause) })
}

// handOffAfter is handOff with meanwhile, run while the waiter waits, in
// place of the pause.
func handOffAfter(t *testing.T, ctx context.Context, held *dlock.Lease, wait func(context.Context) (*dlock.Lease, error), meanwhile func()) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := takeAndRelease(wctx, wait)
	meanwhile()
	mustUnlock(t, held)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("waiter for %q not woken by the release", held.Name())
	}
}

// takeAndRelease runs acquire in a goroutine and unlocks what it takes;
// the channel it returns gives the first error, or nil.
func takeAndRelease(ctx context.Context, acquire func(context.Context) (*dlock.Lease, error)) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := acquire(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	return got
}

// async runs take in a goroutine; the channel yields what it returns (the
// zero value on error, which is reported to t unless ctx has ended).
func async[T any](t *testing.T, ctx context.Context, take func(context.Context) (T, error)) <-chan T {
	got := make(chan T, 1)
	go func() {
		v, err := take(ctx)
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- v
	}()
	return got
}

// within fails t with msg unless got yields nil within d.
func within(t *testing.T, got <-chan error, d time.Duration, msg string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatal(msg)
	}
}

// serve runs t in parallel with the others and gives it a Redis server of
// its own, and t's context.
func serve(t *testing.T) (*redistest.Server, context.Context) {
	t.Helper()
	t.Parallel()
	return redistest.Start(t), t.Context()
}

// start runs t in parallel with the others and gives it a Client on a
// Redis server of its own, and t's context.
func start(t *testing.T, opts ...dlock.Option) (*dlock.Client, context.Context) {
	t.Helper()
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv, opts...)
	return c, ctx
}

// together runs f(0) to f(n-1) in goroutines of their own and returns
// their errors, joined, once all have returned.
func together(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// mustTake gives the lease acquire takes, or fails t at once.
func mustTake(t testing.TB, ctx context.Context, acquire func(context.Context) (*dlock.Lease, error)) *dlock.Lease {
	t.Helper()
	l, err := acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// checkTTL checks key's TTL: within 2 s below want (the time a test's
// steps take), or none when want is -1.
func checkTTL(t *testing.T, rdb *redis.Client, what, key string, want time.Duration) {
	t.Helper()
	const slack = 2 * time.Second
	got := rdb.PTTL(t.Context(), key).Val()
	// A lease's keys may live a ms past its TTL (see deadline_of in
	// lua/lib/permits.lua).
	if want < 0 && got != -1 || want >= 0 && (got > want+time.Millisecond || got <= want-slack) {
		t.Errorf("%s: key %q has TTL %v, want %v", what, key, got, want)
	}
}

// statusOf reads l's status, failing t on an error.
func statusOf(t *testing.T, l interface {
	Status(context.Context) (dlock.Status, error)
}) dlock.Status {
	t.Helper()
	st, err := l.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// givesUpOnStall fails t unless acquire, waiting behind a holder that never
// lets go, gives up with the stall timeout's ErrNotAcquired (not a context
// error) between stall and stall+2s after it starts.
func givesUpOnStall(t *testing.T, what string, stall time.Duration, acquire func() error) {
	t.Helper()
	start := time.Now()
	err := acquire()
	if !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("%s = %v; want a stall ErrNotAcquired", what, err)
	}
	if d := time.Since(start); d < stall || d > stall+2*time.Second {
		t.Errorf("%s gave up after %v; stall timeout %v", what, d, stall)
	}
}
