package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestInspectListForceUnlock(t *testing.T) {
	c, ctx := start(t)

	m, err := c.Mutex("jobs/a", dlock.WithNoExpiry(), dlock.WithMetadata("host-1:42")).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.FairMutex("jobs/b").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	r := mustTake(t, ctx, c.RWMutex("jobs/c").RLock)
	defer r.Unlock(ctx)
	if _, err := c.Mutex("other").Lock(ctx); err != nil {
		t.Fatal(err)
	}

	sts, err := c.Inspect(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 1 || sts[0].Kind != "mutex" || !sts[0].Held || sts[0].Metadata != "host-1:42" || sts[0].TTL != -1 {
		t.Fatalf("Inspect(jobs/a) = %+v", sts)
	}
	if sts, err := c.Inspect(ctx, "never-used"); err != nil || len(sts) != 0 {
		t.Fatalf("Inspect(never-used) = %+v, %v; want none", sts, err)
	}

	all, err := c.List(ctx, "jobs/*")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range all {
		got = append(got, st.Kind+":"+st.Name)
	}
	want := []string{"mutex:jobs/a", "fair:jobs/b", "rw:jobs/c"}
	if len(got) != len(want) {
		t.Fatalf("List(jobs/*) = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("List(jobs/*) = %v, want %v", got, want)
		}
	}
	if _, err := c.List(ctx, "[bad"); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("List with a bad pattern: %v, want ErrInvalid", err)
	}

	// A waiter behind the never-expiring lock gets it once an operator
	// removes it.
	got2 := make(chan error, 1)
	go func() {
		l, err := c.Mutex("jobs/a").Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got2 <- err
	}()
	time.Sleep(100 * time.Millisecond)
	freed, err := c.ForceUnlock(ctx, "jobs/a")
	if err != nil || len(freed) != 1 || freed[0].Fence != m.Fence() {
		t.Fatalf("ForceUnlock = %+v, %v", freed, err)
	}
	within(t, got2, 5*time.Second, "waiter not woken by ForceUnlock")
	if held, err := m.Held(ctx); err != nil || held {
		t.Fatalf("old lease Held = %v, %v after ForceUnlock", held, err)
	}
	if err := m.Unlock(context.Background()); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Unlock of a force-unlocked lease: %v, want ErrLost", err)
	}
	// Read shares are holders too.
	if freed, err := c.ForceUnlock(ctx, "jobs/c"); err != nil || len(freed) != 1 || len(freed[0].Readers) != 1 {
		t.Fatalf("ForceUnlock(jobs/c) = %+v, %v", freed, err)
	}
	if held, _ := r.Held(ctx); held {
		t.Fatal("read share survived ForceUnlock")
	}
}

func TestInspectSetAndForceRelease(t *testing.T) {
	c, ctx := start(t)
	pool := c.MutexSet("pool", dlock.WithNoExpiry())
	if err := pool.Add(ctx, "dev-1", "dev-2"); err != nil {
		t.Fatal(err)
	}
	l, err := pool.AcquireMember(ctx, "dev-2")
	if err != nil {
		t.Fatal(err)
	}
	sts, err := c.Inspect(ctx, "pool")
	if err != nil || len(sts) != 1 || sts[0].Kind != "set" || sts[0].Members != 2 || sts[0].Free != 1 {
		t.Fatalf("Inspect(pool) = %+v, %v", sts, err)
	}
	if all, err := c.List(ctx, ""); err != nil || len(all) != 1 || all[0].Kind != "set" {
		t.Fatalf("List = %+v, %v", all, err)
	}
	if _, err := pool.ForceRelease(ctx, "nope"); !errors.Is(err, dlock.ErrNoMember) {
		t.Fatalf("ForceRelease(nope): %v, want ErrNoMember", err)
	}
	ms, err := pool.ForceRelease(ctx, "dev-2")
	if err != nil || !ms.Held || ms.Fence != l.Fence() {
		t.Fatalf("ForceRelease(dev-2) = %+v, %v", ms, err)
	}
	if held, _ := l.Held(ctx); held {
		t.Fatal("member still held after ForceRelease")
	}
	if again, err := pool.TryAcquireMember(ctx, "dev-2"); err != nil {
		t.Fatalf("member not free after ForceRelease: %v", err)
	} else {
		again.Unlock(ctx)
	}
}

// ForceUnlock inspects, then deletes: a holder that took the lock in
// between must be spared, and nothing reported freed.
func TestForceUnlockSparesNewHolder(t *testing.T) {
	srv := redistest.Start(t)
	h := &hook{}
	c, _ := hooked(t, srv, h)
	other := dlock.New(srv.Client(t))
	defer other.Close()
	ctx := context.Background()
	first := mustTake(t, ctx, other.Mutex("fu", dlock.WithMetadata("first")).Lock)
	var second *dlock.Lease
	h.match = func(cmd redis.Cmder) bool {
		return isEval(cmd) && strings.Contains(strings.ToUpper(cmd.String()), "PUBLISH")
	}
	h.act = delayedBy(func() {
		if err := first.Unlock(ctx); err != nil {
			t.Error(err)
		}
		var err error
		second, err = other.Mutex("fu", dlock.WithMetadata("second")).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
	})
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

// ForceRelease looks, then releases: a holder that took the member in
// between must be spared, and nothing reported freed.
func TestForceReleaseSparesNewHolder(t *testing.T) {
	srv := redistest.Start(t)
	h := &hook{}
	c, _ := hooked(t, srv, h)
	other := dlock.New(srv.Client(t))
	defer other.Close()
	ctx := context.Background()
	pool := other.MutexSet("fr", dlock.WithNoExpiry())
	if err := pool.Add(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	first := mustTake(t, ctx, pool.Acquire)
	var second *dlock.Lease
	h.match = func(cmd redis.Cmder) bool {
		return cmd.Name() == "hget" && strings.HasSuffix(fmt.Sprint(cmd.Args()[1]), ":held")
	}
	h.act = delayedBy(func() {
		if err := first.Unlock(ctx); err != nil {
			t.Error(err)
		}
		var err error
		if second, err = pool.Acquire(ctx); err != nil {
			t.Error(err)
		}
	})
	h.armed.Store(true)
	freed, err := c.MutexSet("fr").ForceRelease(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := second.Held(ctx); !held {
		t.Error("ForceRelease released a holder that came after it looked")
	}
	if freed.Held {
		t.Errorf("ForceRelease reported freeing %+v; the holder it saw was gone", freed)
	}
}

// List must find locks under a prefix holding glob characters.
func TestListFindsLocksUnderAGlobPrefix(t *testing.T) {
	srv := redistest.Start(t)
	c := dlock.New(srv.Client(t), dlock.WithPrefix("app[1]"))
	defer c.Close()
	ctx := context.Background()
	l := mustTake(t, ctx, c.Mutex("x").Lock)
	defer l.Unlock(ctx)
	sts, err := c.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 1 {
		t.Errorf("List with prefix app[1] found %d locks, want 1", len(sts))
	}
}

// TestForceUnlockLostReplyNotSentAgain: ForceUnlock's script whose reply
// is lost is not sent again by go-redis, whose second run would find the
// holder gone and report nothing freed, with no error, though it freed the
// lock: it reports the freed mutex, or an error.
func TestForceUnlockLostReplyNotSentAgain(t *testing.T) {
	srv := redistest.Start(t)
	p, c, other := proxiedRetrying(t, srv)
	ctx := t.Context()
	mustTake(t, ctx, other.Mutex("fu").Lock)
	if _, err := c.ForceUnlock(ctx, "fu"); err != nil { // loads force_unlock
		t.Fatal(err)
	}
	mustTake(t, ctx, other.Mutex("fu").Lock)
	if _, err := c.Inspect(ctx, "fu"); err != nil { // loads the status scripts
		t.Fatal(err)
	}
	dropped := p.DropReply("PUBLISH", false, nil)
	freed, err := c.ForceUnlock(ctx, "fu")
	select {
	case <-dropped:
	default:
		t.Fatalf("no reply lost (ForceUnlock: %v, %v)", freed, err)
	}
	st, _ := other.Mutex("fu").Status(ctx)
	if err == nil && len(freed) != 1 || st.Held {
		t.Errorf("ForceUnlock whose reply was lost: freed %v, err %v; lock held now: %v; want the mutex reported freed", freed, err, st.Held)
	}
}

// TestForceUnlockWakesWaitersOnTheirClientsChannels: waiters hear their
// wake-ups on their clients' channels (see
// TestHandOffWakesOnlyItsWaitersProcess), so ForceUnlock's 'all' goes
// there too, once to each client with a waiter queued, besides the lock's
// own channel; and the waiters then take the lock in turn.
func TestForceUnlockWakesWaitersOnTheirClientsChannels(t *testing.T) {
	for _, k := range queuedKinds {
		if k.name == "MutexSet" {
			continue // ForceRelease, one member at a time
		}
		t.Run(k.name, func(t *testing.T) {
			srv, ctx := serve(t)
			name := "force-wakes-" + marker()
			lk, base := handOffChannel(k.name, name)
			holder, rdb, _ := newClient(t, srv)
			mustTake(t, ctx, k.get(holder, name).Lock) // never released
			got := make(chan error, 4)
			var queued []string
			for range 2 {
				lock := k.get(newClientOnly(t, srv), name)
				for range 2 { // two waiters of one client: one 'all' to it
					go func() {
						l, err := lock.Lock(ctx)
						if err == nil {
							err = l.Unlock(ctx)
						}
						got <- err
					}()
					queued = firstWaiters(t, rdb, lk.Part("queue"), len(queued)+1)
				}
			}
			all := rdb.PSubscribe(ctx, "*")
			defer all.Close()
			if _, err := all.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := holder.ForceUnlock(ctx, name); err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{base: true}
			for _, tok := range queued {
				want[waitersChannel(base, tok)] = true
			}
			if len(want) != 3 {
				t.Fatalf("channels %v: want the lock's and two clients'", want)
			}
			for len(want) > 0 {
				switch m := nextMessage(t, all, func(m *redis.Message) bool { return m.Payload != "all" }); {
				case want[m.Channel]:
					delete(want, m.Channel)
				case strings.Contains(m.Channel, "~"):
					t.Fatalf("'all' on %q, not one of %v, or twice", m.Channel, want)
				}
			}
			for range 4 {
				if err := <-got; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// newClientOnly is newClient's Client alone.
func newClientOnly(t *testing.T, srv *redistest.Server) *dlock.Client {
	t.Helper()
	c, _, _ := newClient(t, srv)
	return c
}
