package dlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
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

// counter counts the commands a go-redis client sends for dlock: one per
// round trip, one per command of a pipeline. The handshake of a new
// connection (HELLO, CLIENT ...) is not counted: it is paid once per
// connection, not per lock operation.
type counter struct {
	n     atomic.Int64
	mu    sync.Mutex
	names []string // the commands counted, for failure messages
}

var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *counter) add(cmd redis.Cmder) {
	if handshake[cmd.Name()] {
		return
	}
	c.n.Add(1)
	c.mu.Lock()
	c.names = append(c.names, cmd.Name())
	c.mu.Unlock()
}

func (c *counter) Load() int64 { return c.n.Load() }

// String lists the commands counted.
func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.names, " ")
}

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
