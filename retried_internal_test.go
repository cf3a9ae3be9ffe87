package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/redistest"
)

// TestTryAgainNeverShortensALease sends a holder's try again after its
// holder lengthened the lease with Refresh, as a first try whose reply
// was lost may still reach Redis after the second took the lock: Redis
// must keep the lease as long as its holder counts on, so a rival is
// refused past the first TTL. (Found by the model's review: the try's
// "sent again" path set the TTL anew, shorter, and the lock went to a
// rival while its holder's deadline still ran.)
func TestTryAgainNeverShortensALease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c, rival := New(srv.Client(t)), New(srv.Client(t))
	t.Cleanup(func() { c.Close(); rival.Close() })
	const ttl = time.Second
	opt := WithTTL(ttl)
	if err := c.MutexSet("again/set").Add(ctx, "only"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		name  string
		take  func() (*Lease, error)
		again func(tok string) (attempt, error)
		rival func() (*Lease, error)
	}{
		{"Mutex",
			func() (*Lease, error) { return c.Mutex("again/mutex", opt).TryLock(ctx) },
			func(tok string) (attempt, error) {
				return c.queued(kindMutex, "again/mutex", []LockOption{opt}).acquisition(false, "").try(ctx, tok)
			},
			func() (*Lease, error) { return rival.Mutex("again/mutex").TryLock(ctx) }},
		{"RWMutex read",
			func() (*Lease, error) { return c.RWMutex("again/rw", opt).TryRLock(ctx) },
			func(tok string) (attempt, error) { return c.RWMutex("again/rw", opt).reader().try(ctx, tok) },
			func() (*Lease, error) { return rival.RWMutex("again/rw").TryLock(ctx) }},
		{"MutexSet",
			func() (*Lease, error) { return c.MutexSet("again/set", opt).TryAcquire(ctx) },
			func(tok string) (attempt, error) {
				return c.MutexSet("again/set", opt).acquisition("", false).try(ctx, tok)
			},
			func() (*Lease, error) { return rival.MutexSet("again/set").TryAcquire(ctx) }},
		{"Semaphore",
			func() (*Lease, error) { return c.Semaphore("again/sem", 1, opt).TryAcquire(ctx, 1) },
			func(tok string) (attempt, error) {
				return c.Semaphore("again/sem", 1, opt).acquisition(1, false).try(ctx, tok)
			},
			func() (*Lease, error) { return rival.Semaphore("again/sem", 1).TryAcquire(ctx, 1) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			l, err := k.take()
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock(ctx)
			if err := l.Refresh(ctx, 20*ttl); err != nil {
				t.Fatal(err)
			}
			if r, err := k.again(l.Token()); err != nil || !r.ok {
				t.Fatalf("the try sent again = (%+v, %v); want the lock, held already", r, err)
			}
			time.Sleep(ttl + ttl/2)
			if other, err := k.rival(); !errors.Is(err, ErrNotAcquired) {
				if other != nil {
					other.Unlock(ctx)
				}
				t.Fatalf("a rival, past the first TTL of a lease refreshed for %v: %v; want %v", 20*ttl, err, ErrNotAcquired)
			}
			select {
			case <-l.Lost():
				t.Fatal("the lease was lost")
			default:
			}
		})
	}
}
