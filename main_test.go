package dlock_test

import (
	"context"
	"fmt"
	"os"
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
	rdb := srv.Client(t)
	cnt := &hook{}
	rdb.AddHook(cnt)
	c := dlock.New(rdb, opts...)
	t.Cleanup(func() { c.Close() })
	return c, rdb, cnt
}

// handOff releases held after pause while wait waits for the same lock,
// and fails t unless wait then takes it (and unlocks it) within 5s: long
// before any lease these tests hold would run out.
func handOff(t *testing.T, ctx context.Context, held *dlock.Lease, wait func(context.Context) (*dlock.Lease, error), pause time.Duration) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := wait(wctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(pause)
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
