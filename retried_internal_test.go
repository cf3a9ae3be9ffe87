package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
		{"RWMutex read beside a lone reader", // kept in the readers' keys
			func() (*Lease, error) {
				lone, err := c.RWMutex("again/rw2").TryRLock(ctx)
				if err != nil {
					return nil, err
				}
				defer lone.Unlock(ctx) // the share taken beside it stays where it is
				return c.RWMutex("again/rw2", opt).TryRLock(ctx)
			},
			func(tok string) (attempt, error) {
				r, err := c.RWMutex("again/rw2", opt).reader().try(ctx, tok)
				if r.alone {
					t.Error("a share beside a lone reader's came back as a lone reader's")
				}
				return r, err
			},
			func() (*Lease, error) { return rival.RWMutex("again/rw2").TryLock(ctx) }},
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

// TestPackedArgumentOfUnknownForm: a try's or a leave's packed argument
// (see queue_acquire.lua, wake_args) of a form the script does not know
// fails the script before it writes anything: the holder keeps the lock
// and the waiter its place, rather than a blocking try that silently
// never joins or a leave that frees the lock and hands it to nobody.
func TestPackedArgumentOfUnknownForm(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	c := New(rdb)
	t.Cleanup(func() { c.Close() })
	q := c.queued(kindMutex, "packed", nil)
	held, err := c.Mutex("packed").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	tok := held.token
	bad := "1 3000" // a try's argument without starve_us
	if err := q.run(ctx, queueAcquire, "other", "30000", bad).Err(); err == nil || !strings.Contains(err.Error(), "unknown form") {
		t.Errorf("try with %q: %v; want the script to fail", bad, err)
	}
	if n := rdb.Exists(ctx, q.keys.Part("queue")).Val(); n != 0 {
		t.Errorf("the failed try queued its caller")
	}
	bad = "1000 PUBLISH" // a leave's argument without the channel
	if err := q.run(ctx, queueLeave, tok, bad).Err(); err == nil || !strings.Contains(err.Error(), "unknown form") {
		t.Errorf("leave with %q: %v; want the script to fail", bad, err)
	}
	if v := rdb.Get(ctx, q.keys.Key()).Val(); !strings.HasPrefix(v, tok+" ") {
		t.Errorf("after the failed leave the owner key holds %q; want the holder's", v)
	}
}

// TestSetTryAgainAfterItsLeaseEndedUnseen sends a MutexSet try again with
// the token of a lease that expired unseen, while more than a hundred
// leases that expired before it are due (a call reclaims a hundred at
// most): the try takes another member, and the ended lease must not
// drop that member's lease later, when it is reclaimed. Sent again once
// more, the try finds the member it took, not a third one. (Found by a
// differential review of part 15; the parent had it too.)
func TestSetTryAgainAfterItsLeaseEndedUnseen(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	c := New(rdb)
	t.Cleanup(func() { c.Close() })
	const before = 100 // the leases due ahead of the token's
	members := make([]string, before+3)
	for i := range members {
		members[i] = fmt.Sprintf("m%03d", i)
	}
	if err := c.MutexSet("unseen").Add(ctx, members...); err != nil {
		t.Fatal(err)
	}
	try := func(ttl time.Duration, tok string) string {
		t.Helper()
		r, err := c.MutexSet("unseen", WithTTL(ttl)).acquisition("", false).try(ctx, tok)
		if err != nil || !r.ok {
			t.Fatalf("try of %s = (%+v, %v); want a member", tok, r, err)
		}
		return r.member
	}
	for i := range before {
		try(50*time.Millisecond, fmt.Sprintf("early%d", i))
	}
	first := try(100*time.Millisecond, "tok")
	time.Sleep(300 * time.Millisecond) // every lease taken has expired
	second := try(time.Minute, "tok")  // reclaims the hundred early ones alone
	if second == first {
		t.Fatalf("the try sent again kept %s, whose lease had ended", first)
	}
	try(time.Minute, "other") // reclaims what is left, first among it
	held := c.MutexSet("unseen").keys.Part("held")
	if got := rdb.HGet(ctx, held, "\x00tok").Val(); got != second {
		t.Errorf("the lease index names %q for the token; want %s, the member it holds", got, second)
	}
	if third := try(time.Minute, "tok"); third != second {
		t.Errorf("sent again once more, the try took %s; want %s, which it holds", third, second)
	}
	if st, err := c.MutexSet("unseen").Status(ctx); err != nil || st.Members-st.Free != 2 {
		t.Errorf("Status = %+v, %v; want 2 members held (the token's and the other's)", st, err)
	}
}
