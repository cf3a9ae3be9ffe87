package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
)

// heldLease is one of many leases a test holds, and how to take it away
// from its holder as an operator would.
type heldLease struct {
	*dlock.Lease
	remove func(ctx context.Context) error
}

// holdMany takes n leases of each kind whose renewals can be batched
// (Mutex, FairMutex, RWMutex read shares, MutexSet members) on c, with
// ttl.
func holdMany(t *testing.T, ctx context.Context, c *dlock.Client, n int, ttl time.Duration) []heldLease {
	t.Helper()
	opt := dlock.WithTTL(ttl)
	set := c.MutexSet("many-set", opt)
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf("m%d", i)
	}
	if err := set.Add(ctx, members...); err != nil {
		t.Fatal(err)
	}
	var out []heldLease
	for i := range n {
		for _, k := range []struct {
			name string
			take func(context.Context) (*dlock.Lease, error)
		}{
			{fmt.Sprintf("many-mutex/%d", i), c.Mutex(fmt.Sprintf("many-mutex/%d", i), opt).TryLock},
			{fmt.Sprintf("many-fair/%d", i), c.FairMutex(fmt.Sprintf("many-fair/%d", i), opt).TryLock},
			{fmt.Sprintf("many-rw/%d", i), c.RWMutex(fmt.Sprintf("many-rw/%d", i), opt).TryRLock},
		} {
			name := k.name
			out = append(out, heldLease{mustTake(t, ctx, k.take), func(ctx context.Context) error {
				_, err := c.ForceUnlock(ctx, name)
				return err
			}})
		}
		l := mustTake(t, ctx, set.TryAcquire)
		out = append(out, heldLease{l, func(ctx context.Context) error {
			_, err := set.ForceRelease(ctx, l.Name())
			return err
		}})
	}
	return out
}

// A client holding 1,000 leases of every kind renews them in a few round
// trips per period, not one per lease; when an operator takes some of
// them away, exactly those see Lost(), within their TTL, and the others
// stay held.
func TestManyLeasesRenewTogetherAndLoseAlone(t *testing.T) {
	srv, ctx := serve(t)
	var started, ended, renewed atomic.Int64
	c, _, cnt := newClient(t, srv, dlock.WithHooks(dlock.Hooks{
		RenewStart: func(ctx context.Context, _ dlock.LeaseInfo, _ bool) context.Context {
			started.Add(1)
			return ctx
		},
		RenewEnd: func(_ context.Context, _ dlock.LeaseInfo, err error) {
			ended.Add(1)
			if err == nil {
				renewed.Add(1)
			}
		},
	}))
	const perKind, ttl = 250, 1500 * time.Millisecond
	leases := holdMany(t, ctx, c, perKind, ttl)
	// between waits until no renewal is under way, so that the commands
	// counted are those of the renewals counted (on a busy machine a
	// round's replies may come long after it was sent).
	between := func() {
		t.Helper()
		if err := eventually(ctx, 10*time.Second, func() error {
			if started.Load() != ended.Load() {
				return errors.New("renewals under way for 10s")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Round trips while holding, once the first renewals (which load
	// the scripts) are done.
	time.Sleep(ttl / 2)
	between()
	trips, cmds, renewals := cnt.trips.Load(), cnt.Load(), renewed.Load()

	const period = 3 * time.Second
	time.Sleep(period)
	between()
	trips, cmds, renewals = cnt.trips.Load()-trips, cnt.Load()-cmds, renewed.Load()-renewals
	perLease := float64(renewals) / float64(len(leases))
	t.Logf("%d leases for %v: %d round trips, %d commands, %d renewals (%.1f per lease)", len(leases), period, trips, cmds, renewals, perLease)
	// Renewed every TTL/6 to TTL/3, in one round trip per batch: at most
	// one per TTL/6, against one per lease per TTL/3 alone (6,000).
	if max := int64(period/(ttl/6)) + 2; trips > max {
		t.Errorf("%d round trips in %v for %d leases; want at most %d", trips, period, len(leases), max)
	}
	if min := float64(period/(ttl/3)) - 1; perLease < min {
		t.Errorf("%.1f renewals per lease in %v; want at least %.0f (one per TTL/3)", perLease, period, min)
	}
	// Per round of renewals, the 500 owner keys (Mutex, FairMutex) go a
	// hundred to a script run; read shares and set members go alone.
	if perRound, want := float64(cmds)/perLease, float64(2*perKind+10); perRound > want {
		t.Errorf("%.0f commands per round of renewals; want at most %.0f (the owner keys' in runs of a hundred)", perRound, want)
	}

	// Take every tenth lease away.
	removed := time.Now()
	for i, l := range leases {
		if i%10 == 3 {
			if err := l.remove(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, l := range leases {
		if i%10 != 3 {
			continue
		}
		select {
		case <-l.Lost():
		case <-time.After(time.Until(removed.Add(ttl))):
			t.Fatalf("lease %d (%s) not lost within the TTL of its removal", i, l.Name())
		}
	}
	time.Sleep(ttl) // long enough for more renewals of the rest
	for i, l := range leases {
		select {
		case <-l.Lost():
			if i%10 != 3 {
				t.Errorf("lease %d (%s) lost, though only every tenth was removed", i, l.Name())
			}
			continue
		default:
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("lease %d (%s): Unlock: %v", i, l.Name(), err)
		}
	}
}
