// Command demo shows dlock's Mutex at work against a Redis server: workers
// that stand for separate machines contend for one lock, a holder crashes
// without unlocking, and a waiter gives up behind a stuck holder.
//
//	go run ./examples/demo -redis 127.0.0.1:6379
//
// The README's first command runs it against a throwaway redis-server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	flag.Parse()
	if err := run(context.Background(), *addr); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string) error {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%6.3fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	// Each worker gets its own Redis connection pool and dlock client, as
	// separate machines would.
	newClient := func() (*dlock.Client, func()) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		c := dlock.New(rdb, dlock.WithPrefix("dlock-demo"))
		return c, func() { c.Close(); rdb.Close() }
	}
	if err := redis.NewClient(&redis.Options{Addr: addr}).Ping(ctx).Err(); err != nil {
		return fmt.Errorf("no Redis at %s: %w", addr, err)
	}

	fmt.Println("1. Four workers, three turns each, on one mutex \"nightly-report\"")
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, done := newClient()
			defer done()
			name := fmt.Sprintf("worker-%d", w+1)
			m := c.Mutex("nightly-report", dlock.WithTTL(5*time.Second), dlock.WithMetadata(name))
			for range 3 {
				lease, err := m.Lock(ctx)
				if err != nil {
					errs[w] = err
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				say("%s holds it   fence %d", name, lease.Fence())
				time.Sleep(50 * time.Millisecond)
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	say("12 turns, %d overlaps", overlaps.Load())

	fmt.Println("\n2. A holder crashes (stops renewing, never unlocks); a waiter gets in when its lease runs out")
	c, done := newClient()
	defer done()
	crashed, err := c.Mutex("migrate", dlock.WithTTL(time.Second), dlock.WithAutoRefresh(false),
		dlock.WithMetadata("worker-9 (about to crash)")).Lock(ctx)
	if err != nil {
		return err
	}
	st, err := c.Mutex("migrate").Status(ctx)
	if err != nil {
		return err
	}
	say("status: held=%v by %q, %v left, fence %d", st.Held, st.Metadata, st.TTL.Round(10*time.Millisecond), st.Fence)
	t0 := time.Now()
	lease, err := c.Mutex("migrate").Lock(ctx)
	if err != nil {
		return err
	}
	say("waiter got it after %v, fence %d > %d", time.Since(t0).Round(10*time.Millisecond), lease.Fence(), crashed.Fence())
	<-crashed.Lost()
	say("the crashed holder's Lost() is closed: it would know its lease is gone")
	lease.Unlock(ctx)

	fmt.Println("\n3. A waiter with a stall timeout gives up behind a holder that keeps the lock")
	stuck, err := c.Mutex("import", dlock.WithTTL(time.Minute), dlock.WithMetadata("worker-3")).Lock(ctx)
	if err != nil {
		return err
	}
	t0 = time.Now()
	_, err = c.Mutex("import", dlock.WithStallTimeout(300*time.Millisecond)).Lock(ctx)
	say("gave up after %v: %v", time.Since(t0).Round(10*time.Millisecond), err)
	return stuck.Unlock(ctx)
}
