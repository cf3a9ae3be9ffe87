package dlock_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// dupHook executes the acquire script twice, as go-redis does when it retries
// a command whose reply was lost (read timeout / reset after write), and
// optionally reports a transient error to the caller.
type dupHook struct {
	armed   atomic.Bool
	failToo bool
}

func (h *dupHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *dupHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *dupHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(cmd.Args()) > 5 && h.armed.CompareAndSwap(true, false) {
			_ = next(ctx, cmd) // first execution: applied, reply "lost"
			if h.failToo {
				cmd.SetErr(io.ErrUnexpectedEOF)
				return io.ErrUnexpectedEOF
			}
		}
		return next(ctx, cmd)
	}
}

// A retried acquire script must recognise its own token, or TryLock would
// report ErrNotAcquired while an orphan lease of its own holds the mutex.
func TestRetriedAcquireIsIdempotent(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	h := &dupHook{}
	rdb.AddHook(h)
	c := dlock.New(rdb)
	defer c.Close()
	ctx := t.Context()
	m := c.Mutex("m", dlock.WithTTL(2*time.Second))
	warm, err := m.TryLock(ctx) // load the script (EVALSHA would NOSCRIPT)
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(ctx)
	h.armed.Store(true)
	_, err = m.TryLock(ctx)
	st, _ := m.Status(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) && st.Held {
		t.Errorf("TryLock = %v, but the mutex is held by our own orphan token (fence %d, TTL %v)", err, st.Fence, st.TTL)
	}
}

// Same, inside Lock's wait loop with WithNoExpiry, where the waiter would
// otherwise wait for itself forever.
func TestRetriedAcquireInWaitLoop(t *testing.T) {
	srv := redistest.Start(t)
	c1, _, _ := newClient(t, srv)
	rdb := srv.Client(t)
	h := &dupHook{failToo: true}
	rdb.AddHook(h)
	c2 := dlock.New(rdb)
	defer c2.Close()
	ctx := t.Context()
	first, err := c1.Mutex("m", dlock.WithNoExpiry()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		l, err := c2.Mutex("m", dlock.WithNoExpiry()).Lock(cctx)
		if err == nil {
			l.Unlock(ctx)
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	h.armed.Store(true)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Lock never acquired a free-then-self-held mutex: %v", err)
	}
}

type failHook struct {
	armed  atomic.Bool
	onFail func()
}

func (h *failHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *failHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && h.armed.CompareAndSwap(true, false) {
			h.onFail()
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return next(ctx, cmd)
	}
}

// A waiter that consumed the wake-up, hit a transient error, and then saw
// its ctx end must hand the wake-up on, or the other local waiter would
// sleep although the mutex is free (forever, with WithNoExpiry).
func TestGivingUpPassesWakeOn(t *testing.T) {
	srv := redistest.Start(t)
	c1, _, _ := newClient(t, srv)
	rdb := srv.Client(t)
	h := &failHook{}
	rdb.AddHook(h)
	c2 := dlock.New(rdb)
	defer c2.Close()
	ctx := t.Context()
	holder, err := c1.Mutex("m", dlock.WithNoExpiry()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(ctx)
	h.onFail = func() { go func() { time.Sleep(3 * time.Millisecond); cancel1() }() }
	m := c2.Mutex("m", dlock.WithNoExpiry())
	go func() { m.Lock(ctx1) }() // W1, oldest
	time.Sleep(200 * time.Millisecond)
	res := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		l, err := m.Lock(cctx) // W2
		if err == nil {
			l.Unlock(ctx)
		}
		res <- err
	}()
	time.Sleep(200 * time.Millisecond)
	h.armed.Store(true)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Errorf("second waiter never woke for a free mutex: %v", err)
	}
}

// A manual Refresh with a shorter TTL must bring the watchdog's deadline
// forward: when another client can take the lock, Lost() is closed.
func TestRefreshShorterTTLMovesDeadline(t *testing.T) {
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
