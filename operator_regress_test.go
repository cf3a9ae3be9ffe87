package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// loseReply runs matching commands on the server, then reports ctx's error
// as if the reply was lost to a cancellation.
type loseReply struct {
	armed  atomic.Bool
	match  func(cmd redis.Cmder) bool
	cancel context.CancelFunc
	before func()
}

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && h.match(cmd) {
			h.armed.Store(false)
			if h.before != nil {
				h.before()
				return next(ctx, cmd)
			}
			_ = next(context.Background(), cmd) // the script runs on the server
			h.cancel()
			cmd.SetErr(context.Canceled)
			return context.Canceled
		}
		return next(ctx, cmd)
	}
}

func isEval(cmd redis.Cmder) bool {
	n := strings.ToLower(cmd.Name())
	return n == "evalsha" || n == "eval"
}

// A Lock cancelled while its try is in flight must not leave the lock held
// by a token nobody has (with WithNoExpiry, for ever).
func TestCancelledTryLeavesNoLock(t *testing.T) {
	srv := redistest.Start(t)
	for _, kind := range []string{"mutex", "fair"} {
		t.Run(kind, func(t *testing.T) {
			rdb := srv.Client(t)
			h := &loseReply{match: isEval}
			rdb.AddHook(h)
			c := dlock.New(rdb)
			defer c.Close()
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
			h.cancel = cancel
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

// ForceUnlock inspects, then deletes: a holder that took the lock in
// between must be spared, and nothing reported freed.
func TestForceUnlockSparesNewHolder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	h := &loseReply{}
	rdb.AddHook(h)
	c := dlock.New(rdb)
	defer c.Close()
	other := dlock.New(srv.Client(t))
	defer other.Close()
	ctx := context.Background()
	first, err := other.Mutex("fu", dlock.WithMetadata("first")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var second *dlock.Lease
	h.match = func(cmd redis.Cmder) bool {
		return isEval(cmd) && strings.Contains(strings.ToUpper(cmd.String()), "PUBLISH")
	}
	h.before = func() {
		if err := first.Unlock(ctx); err != nil {
			t.Error(err)
		}
		second, err = other.Mutex("fu", dlock.WithMetadata("second")).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
	}
	h.armed.Store(true)
	freed, err := c.ForceUnlock(ctx, "fu")
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := second.Held(ctx); !held {
		t.Error("ForceUnlock removed a holder that came after it looked")
	}
	if len(freed) != 0 {
		t.Errorf("ForceUnlock reported freeing %+v; the holder it saw was gone", freed)
	}
}

// List must find locks under a prefix holding glob characters.
func TestListGlobPrefix(t *testing.T) {
	srv := redistest.Start(t)
	c := dlock.New(srv.Client(t), dlock.WithPrefix("app[1]"))
	defer c.Close()
	ctx := context.Background()
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	sts, err := c.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 1 {
		t.Errorf("List with prefix app[1] found %d locks, want 1", len(sts))
	}
}
