package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
)

// permitSlots counts the permits held, outside Redis: a holder of n
// permits creates n of the size slot files, each with O_EXCL. It finds
// fewer than n free only when more than size permits are held at once.
type permitSlots struct {
	dir  string
	size int64
	most atomic.Int64 // the most slots seen taken at once
}

var errTooMany = errors.New("more permits held than the semaphore's size")

// hold takes n slots for d, then frees them.
func (p *permitSlots) hold(n int64, d time.Duration) error {
	var mine []string
	defer func() {
		for _, f := range mine {
			os.Remove(f)
		}
	}()
	for i := range p.size {
		if int64(len(mine)) == n {
			break
		}
		path := filepath.Join(p.dir, fmt.Sprint("slot-", i))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		f.Close()
		mine = append(mine, path)
	}
	if int64(len(mine)) < n {
		return fmt.Errorf("%w: %d wanted, %d of %d slots free", errTooMany, n, len(mine), p.size)
	}
	if es, err := os.ReadDir(p.dir); err == nil {
		for taken := int64(len(es)); ; {
			most := p.most.Load()
			if taken <= most || p.most.CompareAndSwap(most, taken) {
				break
			}
		}
	}
	time.Sleep(d)
	return nil
}

// contendPermits acquires 1 to 3 permits of s (by turns, starting at
// first) until ctx ends, holds them in slots, and records each fence.
func contendPermits(ctx context.Context, s *dlock.Semaphore, slots *permitSlots, first int, record func(uint64)) error {
	for i := first; ctx.Err() == nil; i++ {
		n := int64(1 + i%3)
		l, err := s.Acquire(ctx, n)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		record(l.Fence())
		err = slots.hold(n, time.Millisecond)
		if uerr := l.Unlock(context.WithoutCancel(ctx)); err == nil && uerr != nil {
			err = fmt.Errorf("unlock: %w", uerr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkDistinct fails t unless the fences are all different.
func checkDistinct(t *testing.T, fences []uint64) {
	t.Helper()
	slices.Sort(fences)
	for i := 1; i < len(fences); i++ {
		if fences[i] == fences[i-1] {
			t.Fatalf("fence %d issued twice", fences[i])
		}
	}
}

// semContention runs 8 goroutines on a semaphore of size 3 of c for 2s,
// each taking 1 to 3 permits at a time, and checks that the permits held
// never exceeded 3 (counted outside Redis), that two holders did hold
// permits at once, and that every fence was new.
func semContention(t *testing.T, ctx context.Context, c *dlock.Client, name string) {
	slots := &permitSlots{dir: t.TempDir(), size: 3}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var mu sync.Mutex
	var fences []uint64
	err := together(8, func(i int) error {
		s := c.Semaphore(name, 3, dlock.WithTTL(5*time.Second))
		return contendPermits(cctx, s, slots, i, func(f uint64) { mu.Lock(); fences = append(fences, f); mu.Unlock() })
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(fences) < 8 || slots.most.Load() < 2 {
		t.Fatalf("%d acquisitions, at most %d permits held at once", len(fences), slots.most.Load())
	}
	checkDistinct(t, fences)
	t.Logf("%d acquisitions, up to %d permits held at once", len(fences), slots.most.Load())
}

// TestSemaphoreExclusion: goroutines taking 1 to 3 permits of a size-3
// semaphore never hold more than 3 at once, on one client and on a client
// each.
func TestSemaphoreExclusion(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	t.Run("one client", func(t *testing.T) { semContention(t, ctx, c, "shared") })
	t.Run("a client each", func(t *testing.T) {
		slots := &permitSlots{dir: t.TempDir(), size: 3}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		clients := make([]*dlock.Client, 6)
		for i := range clients {
			clients[i], _, _ = newClient(t, srv)
		}
		err := together(len(clients), func(i int) error {
			return contendPermits(cctx, clients[i].Semaphore("each", 3), slots, i, func(uint64) {})
		})
		if err != nil {
			t.Fatal(err)
		}
		if slots.most.Load() < 2 {
			t.Fatalf("at most %d permits held at once", slots.most.Load())
		}
	})
}

// TestSemaphoreExclusionProcesses: 3 processes of 4 goroutines each.
func TestSemaphoreExclusionProcesses(t *testing.T) {
	srv, _ := serve(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "fences")
	runHelpers(t, 3,
		helperEnv+"=semcontend",
		"DLOCK_TEST_ADDR="+srv.Addr(),
		"DLOCK_TEST_DIR="+t.TempDir(),
		"DLOCK_TEST_LOG="+log,
		"DLOCK_TEST_FOR=3s",
	)
	fences := readFences(t, log)
	if len(fences) < 3 {
		t.Fatalf("only %d acquisitions across 3 processes", len(fences))
	}
	checkDistinct(t, fences)
	t.Logf("%d acquisitions across 3 processes", len(fences))
}

// semContendHelper is the body of a semcontend helper process: 4
// goroutines contend for a size-3 semaphore, holding slots in
// DLOCK_TEST_DIR and logging fences to DLOCK_TEST_LOG.
func semContendHelper() int {
	d, err := time.ParseDuration(os.Getenv("DLOCK_TEST_FOR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log, err := os.OpenFile(os.Getenv("DLOCK_TEST_LOG"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer log.Close()
	c, closeClient := helperClient("semaphore")
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	slots := &permitSlots{dir: os.Getenv("DLOCK_TEST_DIR"), size: 3}
	err = together(4, func(i int) error {
		return contendPermits(ctx, c.Semaphore("shared", 3, dlock.WithTTL(5*time.Second)), slots, i, func(f uint64) {
			fmt.Fprintf(log, "%d\n", f)
		})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// semHelper holds (mode semhold: 2 permits, TTL 1s) or waits for (mode
// semqueue: 2 permits) the size-2 semaphore DLOCK_TEST_NAME until killed.
func semHelper(mode string) int {
	c, closeClient := helperClient("semaphore")
	defer closeClient()
	s := c.Semaphore(os.Getenv("DLOCK_TEST_NAME"), 2, dlock.WithTTL(time.Second), dlock.WithMetadata(mode))
	l, err := s.Acquire(context.Background(), 2)
	if err == nil && mode == "semhold" {
		<-l.Lost()
	}
	fmt.Fprintln(os.Stderr, mode, ": Acquire returned", err)
	return 1
}

// waitSem waits until the semaphore's status satisfies ok.
func waitSem(t *testing.T, s *dlock.Semaphore, what string, ok func(dlock.Status) bool) {
	t.Helper()
	var st dlock.Status
	err := eventually(t.Context(), 5*time.Second, func() error {
		if st = statusOf(t, s); !ok(st) {
			return fmt.Errorf("status %+v: want %s", st, what)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// acquireAsync acquires n permits of s in a goroutine (see async).
func acquireAsync(t *testing.T, ctx context.Context, s *dlock.Semaphore, n int64) <-chan *dlock.Lease {
	return async(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, n) })
}

// receive returns what got yields within 5s, or fails t.
func receive[T any](t *testing.T, got <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-got:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing within 5s", what)
	}
	var zero T
	return zero
}

// pending fails t if got has yielded.
func pending[T any](t *testing.T, got <-chan T, what string) {
	t.Helper()
	select {
	case <-got:
		t.Fatalf("%s went ahead", what)
	default:
	}
}

// TestSemaphoreGrantsThoseThatFit: a release hands its permits to the
// waiters that now fit, in queue order, with the message that wakes each
// (no try of their own), stops at the first that does not fit, and wakes
// nobody behind it even when their request would fit.
func TestSemaphoreGrantsThoseThatFit(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	s := c.Semaphore("fit", 3, dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, 3) })

	wh := &hook{mark: "fit-waiter"}
	wc, _ := hooked(t, srv, wh)
	ws := wc.Semaphore("fit", 3, dlock.WithTTL(30*time.Second), dlock.WithMetadata(wh.mark))
	var got []<-chan *dlock.Lease
	for i, n := range []int64{1, 1, 3, 1} {
		got = append(got, acquireAsync(t, ctx, ws, n))
		waitSem(t, s, fmt.Sprint(i+1, " waiters"), func(st dlock.Status) bool { return len(st.Waiters) == i+1 })
	}
	tries := wh.marked.Load()
	st := statusOf(t, s)
	if want := []int64{1, 1, 3, 1}; !slices.Equal(permitsOf(st.Waiters), want) {
		t.Fatalf("waiters want %v permits, expected %v", permitsOf(st.Waiters), want)
	}

	mustUnlock(t, h)
	l1, l2 := receive(t, got[0], "1st waiter"), receive(t, got[1], "2nd waiter")
	waitSem(t, s, "2 in use, 2 waiting", func(st dlock.Status) bool { return st.InUse == 2 && len(st.Waiters) == 2 })
	pending(t, got[2], "the 3-permit waiter")
	pending(t, got[3], "the waiter behind the 3-permit one")
	if n := wh.marked.Load(); n != tries {
		t.Errorf("%d tries after the release; the grants should need none", n-tries)
	}

	mustUnlock(t, l1)
	pending(t, got[2], "the 3-permit waiter with 2 permits free")
	mustUnlock(t, l2)
	l3 := receive(t, got[2], "3-permit waiter")
	pending(t, got[3], "the last waiter")
	mustUnlock(t, l3)
	mustUnlock(t, receive(t, got[3], "last waiter"))
	if n := wh.marked.Load(); n != tries {
		t.Errorf("%d tries after the first release; the grants should need none", n-tries)
	}
}

func permitsOf(ws []dlock.Waiter) []int64 {
	var out []int64
	for _, w := range ws {
		out = append(out, w.Permits)
	}
	return out
}

// TestSemaphoreLargeNotStarved: a request for every permit gets them
// while a stream of single-permit callers keeps some held: newcomers
// queue behind it.
func TestSemaphoreLargeNotStarved(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	const size = 4
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var small atomic.Int64
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := c.Semaphore("stream", size)
			for sctx.Err() == nil {
				l, err := s.Acquire(sctx, 1)
				if err != nil {
					return
				}
				small.Add(1)
				time.Sleep(2 * time.Millisecond)
				l.Unlock(ctx)
			}
		}()
	}
	s := c.Semaphore("stream", size)
	waitSem(t, s, "permits in use", func(st dlock.Status) bool { return st.InUse > 0 })
	before := small.Load()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := s.Acquire(lctx, size)
	if err != nil {
		t.Fatalf("the %d-permit request, after %d single ones: %v", size, small.Load()-before, err)
	}
	during := small.Load()
	time.Sleep(20 * time.Millisecond)
	if small.Load() != during {
		t.Error("a single permit was taken while all were held")
	}
	mustUnlock(t, l)
	stop()
	wg.Wait()
	t.Logf("%d single-permit acquisitions while the large one waited", during-before)
}

// TestSemaphoreTryAcquireDoesNotJumpQueue: TryAcquire fails while anyone
// waits, even for permits that are free.
func TestSemaphoreTryAcquireDoesNotJumpQueue(t *testing.T) {
	c, ctx := start(t)
	s := c.Semaphore("try", 2, dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 1) })
	got := acquireAsync(t, ctx, s, 2)
	waitSem(t, s, "a waiter", func(st dlock.Status) bool { return len(st.Waiters) == 1 })
	if l, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire(1) with 1 free and a waiter = %v, %v; want ErrNotAcquired", l, err)
	}
	mustUnlock(t, h)
	mustUnlock(t, receive(t, got, "waiter"))
	mustUnlock(t, mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 2) }))
}

// TestSemaphoreCancelWakesHeldBack: a waiter whose ctx ends leaves the
// queue at once, and those it held back go on without a release.
func TestSemaphoreCancelWakesHeldBack(t *testing.T) {
	c, ctx := start(t)
	s := c.Semaphore("cancel", 2, dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, 1) })
	bctx, cancel := context.WithCancel(ctx)
	big := make(chan error, 1)
	go func() { _, err := s.Acquire(bctx, 2); big <- err }()
	waitSem(t, s, "a waiter", func(st dlock.Status) bool { return len(st.Waiters) == 1 })
	small := acquireAsync(t, ctx, s, 1)
	waitSem(t, s, "2 waiters", func(st dlock.Status) bool { return len(st.Waiters) == 2 })
	pending(t, small, "the waiter behind the 2-permit one")
	cancel()
	if err := receive(t, big, "cancelled waiter"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v", err)
	}
	mustUnlock(t, receive(t, small, "held-back waiter"), h)
	if st := statusOf(t, s); st.InUse != 0 || len(st.Waiters) != 0 {
		t.Fatalf("status %+v: want nothing held or queued", st)
	}
}

// TestSemaphoreCrashedHolder: a holder process killed with its permits
// gives them back when its lease runs out.
func TestSemaphoreCrashedHolder(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	s := c.Semaphore("crash", 2)
	holder := startHelper(t, srv, "semhold", "crash")
	waitSem(t, s, "the helper holding 2", func(st dlock.Status) bool { return st.InUse == 2 })
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-holder.exited
	killed := time.Now()
	l, err := s.TryAcquire(ctx, 1)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire right after the kill = %v, %v; the lease should still hold", l, err)
	}
	l = mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, 2) })
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("permits back %v after the kill; TTL 1s", d)
	}
	mustUnlock(t, l)
}

// TestSemaphoreDeadWaiterSkipped: a queued process killed is dropped from
// the queue within the liveness timeout, and the waiter behind it goes on.
func TestSemaphoreDeadWaiterSkipped(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	s := c.Semaphore("dead", 2, dlock.WithTTL(30*time.Second))
	h := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, 1) })
	doomed := startHelper(t, srv, "semqueue", "dead")
	waitSem(t, s, "the helper queued", func(st dlock.Status) bool { return len(st.Waiters) == 1 })
	live := acquireAsync(t, ctx, s, 1)
	waitSem(t, s, "2 waiters", func(st dlock.Status) bool { return len(st.Waiters) == 2 })
	if err := doomed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-doomed.exited
	killed := time.Now()
	l := receive(t, live, "the waiter behind the dead one")
	if d := time.Since(killed); d > 3*time.Second+500*time.Millisecond {
		t.Errorf("dead waiter skipped %v after the kill; liveness timeout 3s", d)
	}
	mustUnlock(t, l, h)
}

// TestSemaphoreLostOnFlush: the leases vanish; Lost() closes and Do's
// context is cancelled with cause ErrLost, within the TTL.
func TestSemaphoreLostOnFlush(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	const ttl = 900 * time.Millisecond
	err := c.Semaphore("flush", 3, dlock.WithTTL(ttl)).Do(ctx, 2, flushInside(t, rdb, ttl))
	if !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Do = %v, want the unlock's ErrLost", err)
	}
}

// TestSemaphoreFencesRise: each lease's fence is above every one issued
// before, also after the semaphore's keys expired.
func TestSemaphoreFencesRise(t *testing.T) {
	c, ctx := start(t)
	s := c.Semaphore("fences", 3, dlock.WithTTL(50*time.Millisecond), dlock.WithAutoRefresh(false))
	var last uint64
	for i := range 6 {
		var ls []*dlock.Lease
		for range 2 {
			l := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 1) })
			if l.Fence() <= last {
				t.Fatalf("fence %d after %d", l.Fence(), last)
			}
			last = l.Fence()
			ls = append(ls, l)
		}
		if i%2 == 0 {
			mustUnlock(t, ls...)
		} else {
			time.Sleep(100 * time.Millisecond) // the keys expire
		}
	}
}

// TestSemaphoreInvalid: bad sizes and permit counts are ErrInvalid, a
// Redlock client's semaphore ErrUnsupported, and nothing touches Redis.
func TestSemaphoreInvalid(t *testing.T) {
	srv, ctx := serve(t)
	c, _, cnt := newClient(t, srv)
	for _, size := range []int64{0, -1, dlock.MaxPermits + 1} {
		s := c.Semaphore("bad", size)
		if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("size %d: TryAcquire = %v, want ErrInvalid", size, err)
		}
		if _, err := s.Status(ctx); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("size %d: Status = %v, want ErrInvalid", size, err)
		}
	}
	s := c.Semaphore("bad", 3)
	for _, n := range []int64{0, -1, 4} {
		if _, err := s.Acquire(ctx, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Acquire(%d) of 3 = %v, want ErrInvalid", n, err)
		}
		if _, err := s.TryAcquire(ctx, n); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("TryAcquire(%d) of 3 = %v, want ErrInvalid", n, err)
		}
		if err := s.Do(ctx, n, func(context.Context) error { return nil }); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Do(%d) of 3 = %v, want ErrInvalid", n, err)
		}
	}
	if _, err := c.Semaphore("", 3).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("empty name: %v, want ErrInvalid", err)
	}
	if _, err := c.Semaphore("bad", 3, dlock.WithTTL(-time.Second)).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("bad TTL: %v, want ErrInvalid", err)
	}
	if n := cnt.Load(); n != 0 {
		t.Errorf("%d commands sent for bad input: %s", n, cnt)
	}
	rl := dlock.NewRedlock([]redis.UniversalClient{srv.Client(t)})
	defer rl.Close()
	if _, err := rl.Semaphore("x", 3).Acquire(ctx, 1); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Redlock semaphore: %v, want ErrUnsupported", err)
	}
}

// TestSemaphoreStatus: Status shows the size, the permits in use, the
// holders with their permits oldest first, and the waiters with theirs;
// Inspect shows the size the latest acquisition asked under.
func TestSemaphoreStatus(t *testing.T) {
	c, ctx := start(t)
	s := c.Semaphore("st", 5, dlock.WithTTL(30*time.Second), dlock.WithMetadata("a"))
	a := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, 2) })
	b := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) {
		return c.Semaphore("st", 5, dlock.WithMetadata("b"), dlock.WithNoExpiry()).Acquire(ctx, 3)
	})
	got := acquireAsync(t, ctx, c.Semaphore("st", 5, dlock.WithMetadata("w")), 4)
	waitSem(t, s, "a waiter", func(st dlock.Status) bool { return len(st.Waiters) == 1 })
	st := statusOf(t, s)
	if st.Kind != "semaphore" || !st.Held || st.Size != 5 || st.InUse != 5 || st.Fence != b.Fence() {
		t.Errorf("status %+v", st)
	}
	if st.TTL <= 29*time.Second || st.TTL > 30*time.Second {
		t.Errorf("TTL %v, want the first lease's, under 30s", st.TTL)
	}
	if len(st.Holders) != 2 || st.Holders[0].Metadata != "a" || st.Holders[0].Permits != 2 || st.Holders[0].Fence != a.Fence() ||
		st.Holders[1].Metadata != "b" || st.Holders[1].Permits != 3 || st.Holders[1].TTL != -1 {
		t.Errorf("holders %+v", st.Holders)
	}
	if w := st.Waiters[0]; w.Metadata != "w" || w.Permits != 4 {
		t.Errorf("waiter %+v", w)
	}
	if st := statusOf(t, c.Semaphore("st", 9)); st.Size != 9 {
		t.Errorf("Size %d, want the caller's 9", st.Size)
	}
	sts, err := c.Inspect(ctx, "st")
	if err != nil || len(sts) != 1 || sts[0].Size != 5 || sts[0].InUse != 5 {
		t.Errorf("Inspect = %+v, %v", sts, err)
	}
	mustUnlock(t, a, b)
	mustUnlock(t, receive(t, got, "waiter"))
	if st := statusOf(t, s); st.Held || st.InUse != 0 || len(st.Holders) != 0 || st.TTL != 0 {
		t.Errorf("free: %+v", st)
	}
}

// TestSemaphoreCountThroughCommonPaths: the permits in use as the
// uncontended try and release count them: set by the first lease, added
// to by the next, taken from by a release that leaves a lease held, and
// gone with both keys at the last release, after which all the permits
// can be taken at once.
func TestSemaphoreCountThroughCommonPaths(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	s := c.Semaphore("count", 5)
	take := func(n int64) *dlock.Lease {
		t.Helper()
		return mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, n) })
	}
	expect := func(what string, inUse int64, keys int) {
		t.Helper()
		if st := statusOf(t, s); st.InUse != inUse {
			t.Errorf("%s: %d permits in use, want %d", what, st.InUse, inUse)
		}
		ks, err := rdb.Keys(ctx, "*{count}*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ks) - 1; n != keys { // the last fence stays a minute
			t.Errorf("%s: keys %q, want the fence and %d more", what, ks, keys)
		}
	}
	a := take(2)
	expect("the first lease", 2, 2)
	b := take(1)
	expect("a second lease", 3, 2)
	mustUnlock(t, a)
	expect("the first released", 1, 2)
	mustUnlock(t, b)
	expect("the last released", 0, 0)
	mustUnlock(t, take(5))
	expect("all five taken and released", 0, 0)
}

// TestSemaphoreRoundTrips: an uncontended TryAcquire, Refresh, Held and
// Unlock cost one round trip each, and one script.
func TestSemaphoreRoundTrips(t *testing.T) {
	srv, ctx := serve(t)
	c, _, cnt := newClient(t, srv)
	s := c.Semaphore("trips", 3, dlock.WithAutoRefresh(false))
	mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 1) }) // loads the script
	before := cnt.trips.Load()
	l := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 2) })
	if err := l.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("Held = %v, %v", ok, err)
	}
	mustUnlock(t, l)
	if n := cnt.trips.Load() - before; n > 4+3 { // + first-time script loads
		t.Errorf("%d round trips for TryAcquire, Refresh, Held, Unlock: %s", n, cnt)
	}
	before = cnt.trips.Load()
	mustUnlock(t, mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 2) }))
	if n := cnt.trips.Load() - before; n != 2 {
		t.Errorf("%d round trips for TryAcquire and Unlock, want 2: %s", n, cnt)
	}
}

// TestSemaphoreStallTimeout: Acquire gives up once nobody has acquired
// permits for the stall timeout while it waited.
func TestSemaphoreStallTimeout(t *testing.T) {
	c, ctx := start(t)
	s := c.Semaphore("stall", 2, dlock.WithNoExpiry())
	h := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, 2) })
	const stall = 500 * time.Millisecond
	givesUpOnStall(t, "Acquire", stall, func() error {
		_, err := c.Semaphore("stall", 2, dlock.WithStallTimeout(stall)).Acquire(ctx, 1)
		return err
	})
	if st := statusOf(t, s); len(st.Waiters) != 0 {
		t.Errorf("waiters %+v after the stall; want none", st.Waiters)
	}
	mustUnlock(t, h)
}

// TestSemaphoreKeysExpire: no key of a semaphore outlives its leases, also
// after a lease that never expires is released while others remain.
func TestSemaphoreKeysExpire(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	forever := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) {
		return c.Semaphore("exp", 3, dlock.WithNoExpiry()).Acquire(ctx, 1)
	})
	mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) {
		return c.Semaphore("exp", 3, dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRefresh(false)).Acquire(ctx, 2)
	})
	mustUnlock(t, forever)
	err := eventually(ctx, 3*time.Second, func() error {
		keys, err := rdb.Keys(ctx, "*{exp}*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			if ttl, err := rdb.PTTL(ctx, k).Result(); err != nil || ttl < 0 {
				return fmt.Errorf("key %s: TTL %v, %v", k, ttl, err)
			}
		}
		if len(keys) > 1 { // the fence key stays a minute
			return fmt.Errorf("keys %q left after the last lease ran out", keys)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreKeysLiveAsTheLongestLease: the main and leases keys
// expire with the lease that ends last, through leases that come and go,
// and never while a lease that never expires is held.
func TestSemaphoreKeysLiveAsTheLongestLease(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	expect := func(what string, ttl time.Duration) {
		t.Helper()
		keys, err := rdb.Keys(ctx, "*{longest}*").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range keys {
			if strings.HasSuffix(k, "fence") {
				continue // the last fence lives a minute past its clock
			}
			n++
			checkTTL(t, rdb, what, k, ttl)
		}
		if n != 2 {
			t.Errorf("%s: keys %q, want the main and leases keys and the fence", what, keys)
		}
	}
	take := func(opts ...dlock.LockOption) *dlock.Lease {
		t.Helper()
		s := c.Semaphore("longest", 10, append(opts, dlock.WithAutoRefresh(false))...)
		return mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 1) })
	}
	short := take(dlock.WithTTL(10 * time.Second))
	expect("one lease of 10s", 10*time.Second)
	long := take(dlock.WithTTL(time.Minute))
	expect("a lease of 1m joins", time.Minute)
	shorter := take(dlock.WithTTL(5 * time.Second))
	expect("a lease of 5s joins", time.Minute)
	forever := take(dlock.WithNoExpiry())
	expect("a lease that never expires joins", -1)
	mustUnlock(t, forever)
	expect("the lease that never expires left", time.Minute)
	mustUnlock(t, long, short, shorter)
}

// TestSemaphoreForceUnlock: an operator's ForceUnlock removes every
// lease; the waiter goes on, and the old holders find their leases lost.
func TestSemaphoreForceUnlock(t *testing.T) {
	c, ctx := start(t)
	s := c.Semaphore("force", 2, dlock.WithNoExpiry())
	h := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, 2) })
	got := acquireAsync(t, ctx, s, 1)
	waitSem(t, s, "a waiter", func(st dlock.Status) bool { return len(st.Waiters) == 1 })
	freed, err := c.ForceUnlock(ctx, "force")
	if err != nil || len(freed) != 1 || freed[0].Kind != "semaphore" || freed[0].InUse != 2 {
		t.Fatalf("ForceUnlock = %+v, %v", freed, err)
	}
	mustUnlock(t, receive(t, got, "waiter"))
	if ok, err := h.Held(ctx); ok || err != nil {
		t.Errorf("Held after ForceUnlock = %v, %v; want false", ok, err)
	}
	if err := h.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock after ForceUnlock = %v, want ErrLost", err)
	}
}

// TestSemaphoreSelfGrantWakesNobodyElse: a first waiter whose own try
// finds its permits free (the holder's lease ran out) is granted them by
// grant_waiters in that try, which also publishes the grant to itself.
// The message reaches the waiter's hub registration after the try
// answered. Nobody else is woken (README): the wake-up came with a grant
// for the first waiter's token alone, and is not passed on to the next
// local waiter, which would send a try of its own for nothing.
func TestSemaphoreSelfGrantWakesNobodyElse(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	wh := &semTries{meta: "self-b"}
	rdb := srv.Client(t)
	rdb.AddHook(wh)
	wc := dlock.New(rdb)
	t.Cleanup(func() { wc.Close() })
	spurious := 0
	const rounds = 10
	for i := range rounds {
		name := fmt.Sprint("self-", i)
		s := c.Semaphore(name, 2, dlock.WithTTL(2*time.Second), dlock.WithAutoRefresh(false))
		mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, 2) })
		a := acquireAsync(t, ctx, wc.Semaphore(name, 2, dlock.WithTTL(30*time.Second), dlock.WithMetadata("self-a")), 2)
		waitSem(t, s, "1 waiter", func(st dlock.Status) bool { return len(st.Waiters) == 1 })
		b := acquireAsync(t, ctx, wc.Semaphore(name, 2, dlock.WithTTL(30*time.Second), dlock.WithMetadata("self-b")), 1)
		waitSem(t, s, "2 waiters", func(st dlock.Status) bool { return len(st.Waiters) == 2 })
		// The waiter behind tries again once subscribed (a release may
		// have come before): counted from when its tries have settled.
		tries := settled(&wh.n)
		select {
		case <-a:
			t.Fatal("the first waiter took the permits before the count began: the holder's TTL is too short for this machine")
		default:
		}
		la := receive(t, a, "first waiter, once the holder's lease ran out")
		time.Sleep(200 * time.Millisecond)
		pending(t, b, "the waiter behind")
		if wh.n.Load() != tries {
			spurious++
		}
		mustUnlock(t, la)
		mustUnlock(t, receive(t, b, "waiter behind"))
	}
	if spurious > 0 {
		t.Errorf("in %d of %d rounds the waiter behind sent a try when the first took the permits, none free for it", spurious, rounds)
	}
}

// TestSemaphoreTryAcquireAfterManyExpired: 150 leases of one permit each
// ran out (a crashed client's); every permit is free, and nobody waits,
// yet TryAcquire of all of them is refused: one call drops 100 expired
// leases and counts the other 50 as in use.
func TestSemaphoreTryAcquireAfterManyExpired(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	const size = 151
	// A long lease of one permit keeps the keys (Redis would expire them
	// with the last lease otherwise).
	keeper := mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) {
		return c.Semaphore("many", size, dlock.WithTTL(time.Minute)).TryAcquire(ctx, 1)
	})
	short := c.Semaphore("many", size, dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRefresh(false))
	for range size - 1 {
		mustTake(t, ctx, func(ctx context.Context) (*dlock.Lease, error) { return short.TryAcquire(ctx, 1) })
	}
	time.Sleep(400 * time.Millisecond)
	s := c.Semaphore("many", size)
	if st := statusOf(t, s); st.InUse != 1 || len(st.Waiters) != 0 {
		t.Fatalf("status %+v: want 1 permit in use (the keeper's), nobody waiting", st)
	}
	l, err := s.TryAcquire(ctx, size-1)
	if err != nil {
		t.Fatalf("TryAcquire(%d) with %d permits free and nobody waiting: %v", size-1, size-1, err)
	}
	mustUnlock(t, l, keeper)
}

// semTries counts a Semaphore's tries (not its heartbeats) by callers
// whose metadata is meta.
type semTries struct {
	meta string
	n    atomic.Int64
}

func (h *semTries) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *semTries) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next // tries go alone
}

func (h *semTries) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// sem_acquire's ARGV: token, TTL, metadata, n, size, join (1: a try
		// that joins the queue; 2: a heartbeat), ...
		args := cmd.Args()
		if i := slices.Index(args, any(h.meta)); i >= 0 && i+3 < len(args) && fmt.Sprint(args[i+3]) == "1" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// settled waits until n has not changed for 300ms (at most 1.5s), and
// returns it.
func settled(n *atomic.Int64) int64 {
	v := n.Load()
	for range 5 {
		time.Sleep(300 * time.Millisecond)
		w := n.Load()
		if w == v {
			return v
		}
		v = w
	}
	return v
}
