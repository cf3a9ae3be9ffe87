package dlock_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// exampleAddr is the address of the redis-server that Example functions
// use; TestMain starts it.
var exampleAddr string

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
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// counter counts the commands a go-redis client sends: one per round trip,
// one per command of a pipeline.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func (c *counter) Load() int64 { return c.n.Load() }

// newClient returns a dlock client on srv, with its own go-redis client
// whose commands are counted. Both are closed in t.Cleanup.
func newClient(t testing.TB, srv *redistest.Server, opts ...dlock.Option) (*dlock.Client, *redis.Client, *counter) {
	t.Helper()
	rdb := srv.Client(t)
	cnt := &counter{}
	rdb.AddHook(cnt)
	c := dlock.New(rdb, opts...)
	t.Cleanup(func() { c.Close() })
	return c, rdb, cnt
}
