package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
)

// rwMarkers checks reader/writer exclusion outside Redis with files in a
// directory: a writer creates "writer" with O_EXCL and fails if any
// "reader-*" exists; a reader creates its own "reader-<pid>-<n>" and fails
// if "writer" exists. Each checks again just before removing its file, so
// of two overlapping holders the one that came first sees the other's file
// at the latest then.
type rwMarkers struct {
	dir     string
	seq     atomic.Int64
	readers atomic.Int64 // readers inside now, in this process
	most    atomic.Int64 // the most readers inside at once, in this process
}

func (m *rwMarkers) write(hold time.Duration, record func()) error {
	path := filepath.Join(m.dir, "writer")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%w: two writers", errOverlap)
		}
		return err
	}
	f.Close()
	check := func() error {
		rs, err := filepath.Glob(filepath.Join(m.dir, "reader-*"))
		if err == nil && len(rs) > 0 {
			err = fmt.Errorf("%w: a writer beside %s", errOverlap, filepath.Base(rs[0]))
		}
		return err
	}
	err = check()
	if err == nil {
		record()
		time.Sleep(hold)
		err = check()
	}
	return errors.Join(err, os.Remove(path))
}

func (m *rwMarkers) read(hold time.Duration, record func()) error {
	path := filepath.Join(m.dir, fmt.Sprintf("reader-%d-%d", os.Getpid(), m.seq.Add(1)))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	check := func() error {
		_, err := os.Stat(filepath.Join(m.dir, "writer"))
		if err == nil {
			return fmt.Errorf("%w: a reader beside the writer", errOverlap)
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	err = check()
	if err == nil {
		n := m.readers.Add(1)
		for {
			most := m.most.Load()
			if n <= most || m.most.CompareAndSwap(most, n) {
				break
			}
		}
		record()
		time.Sleep(hold)
		m.readers.Add(-1)
		err = check()
	}
	return errors.Join(err, os.Remove(path))
}

// rwEvent is one acquisition in the order the holders recorded it.
type rwEvent struct {
	write bool
	fence uint64
}

// rwMix runs readers and writers on the lock name until ctx ends: readers
// hold 2ms and pause 2ms, writers hold 1ms and pause 10ms (so that under
// PreferWriters the readers get turns too). Half the readers use
// PreferReaders, half PreferWriters. record is called inside each critical
// section.
func rwMix(ctx context.Context, c *dlock.Client, name string, m *rwMarkers, readers, writers int, record func(rwEvent)) error {
	errs := make([]error, readers+writers)
	var wg sync.WaitGroup
	for i := range readers + writers {
		write := i >= readers
		mode := dlock.PreferWriters
		if !write && i%2 == 1 {
			mode = dlock.PreferReaders
		}
		rw := c.RWMutex(name, dlock.WithTTL(5*time.Second), dlock.WithRWMode(mode))
		lock, hold, pause := rw.RLock, 2*time.Millisecond, 2*time.Millisecond
		if write {
			lock, hold, pause = rw.Lock, time.Millisecond, 10*time.Millisecond
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := lock(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errs[i] = err
					}
					return
				}
				rec := func() { record(rwEvent{write, l.Fence()}) }
				if write {
					err = m.write(hold, rec)
				} else {
					err = m.read(hold, rec)
				}
				if uerr := l.Unlock(context.WithoutCancel(ctx)); uerr != nil {
					err = errors.Join(err, fmt.Errorf("unlock: %w", uerr))
				}
				if err != nil {
					errs[i] = err
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkRWFences checks the fence order of recorded acquisitions: a
// writer's fence is above every fence before it, a reader's above every
// writer's before it (concurrent readers may record out of order).
func checkRWFences(t *testing.T, events []rwEvent) (reads, writes int) {
	t.Helper()
	var most, lastWrite uint64
	for i, e := range events {
		if e.write {
			writes++
			if e.fence <= most {
				t.Errorf("writer's fence %d at acquisition %d is not above %d before it", e.fence, i, most)
			}
			lastWrite = e.fence
		} else {
			reads++
			if e.fence <= lastWrite {
				t.Errorf("reader's fence %d at acquisition %d is not above the writer's %d before it", e.fence, i, lastWrite)
			}
		}
		most = max(most, e.fence)
	}
	return reads, writes
}

func TestRWBasics(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	rw := c.RWMutex("doc", dlock.WithTTL(time.Minute))

	// Four readers hold it at once.
	var rs []*dlock.Lease
	for i := range 4 {
		r, err := c.RWMutex("doc", dlock.WithTTL(time.Minute), dlock.WithMetadata(fmt.Sprint("reader-", i))).TryRLock(ctx)
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
		rs = append(rs, r)
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock beside readers: %v, want ErrNotAcquired", err)
	}
	st, err := rw.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Kind != "rw" || st.Name != "doc" || !st.Held || st.Metadata != "" || st.WriterWaiting || len(st.Readers) != 4 {
		t.Fatalf("status with 4 readers: %+v", st)
	}
	for i, h := range st.Readers {
		if h.Metadata != fmt.Sprint("reader-", i) || h.Fence != rs[i].Fence() || h.TTL <= 50*time.Second || h.Since.IsZero() {
			t.Errorf("reader %d in status: %+v, want fence %d", i, h, rs[i].Fence())
		}
	}
	var readMax uint64
	for _, r := range rs {
		if held, err := r.Held(ctx); err != nil || !held {
			t.Errorf("reader Held = %v, %v", held, err)
		}
		readMax = max(readMax, r.Fence())
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if held, err := rs[0].Held(ctx); err != nil || held {
		t.Errorf("Held after Unlock = %v, %v", held, err)
	}

	w, err := c.RWMutex("doc", dlock.WithTTL(time.Minute), dlock.WithMetadata("writer")).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the readers left: %v", err)
	}
	if w.Fence() <= readMax {
		t.Errorf("writer's fence %d not above the readers' %d", w.Fence(), readMax)
	}
	if _, err := rw.TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryRLock beside a writer: %v", err)
	}
	if _, err := rw.RLocker().TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("RLocker().TryLock beside a writer: %v", err)
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second writer: %v", err)
	}
	st, err = rw.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Metadata != "writer" || st.Fence != w.Fence() || len(st.Readers) != 0 || st.TTL <= 50*time.Second {
		t.Fatalf("status with a writer: %+v", st)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := mustTake(t, ctx, rw.RLocker().TryLock)
	if r.Fence() <= w.Fence() {
		t.Errorf("reader's fence %d not above the writer's %d", r.Fence(), w.Fence())
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Unlock(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("second Unlock: %v, want ErrInvalid", err)
	}

	// A reader that never expires: no expiry on its keys while it reads.
	forever := mustTake(t, ctx, c.RWMutex("doc", dlock.WithNoExpiry()).RLock)
	if st, err := rw.Status(ctx); err != nil || len(st.Readers) != 1 || st.Readers[0].TTL != -1 {
		t.Fatalf("status with a reader that never expires: %+v, %v", st, err)
	}
	if err := forever.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = rw.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Held || len(st.Readers) != 0 || st.Fence != forever.Fence() {
		t.Fatalf("status when free: %+v, want the last fence %d", st, forever.Fence())
	}
	// With the lock free, no key of it may live forever.
	ks, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < 0 || ttl > 2*time.Minute {
			t.Errorf("key %q has TTL %v; want a bounded one", k, ttl)
		}
	}
}

// TestReaderKeysLiveAsTheLongestShare: the three keys of an RWMutex's
// readers expire with the share that ends last, through shares that come
// and go, and never while a share that never expires reads.
func TestReaderKeysLiveAsTheLongestShare(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	readerKeys := func() []string {
		t.Helper()
		var ks []string
		for _, part := range []string{"readers", "rexp", "rmeta"} {
			k, err := rdb.Keys(ctx, "*{shares}*"+part).Result()
			if err != nil || len(k) != 1 {
				t.Fatalf("keys of %s: %v, %v; want one", part, k, err)
			}
			ks = append(ks, k[0])
		}
		return ks
	}
	expect := func(what string, ttl time.Duration) {
		t.Helper()
		for _, k := range readerKeys() {
			checkTTL(t, rdb, what, k, ttl)
		}
	}
	rlock := func(opts ...dlock.LockOption) *dlock.Lease {
		t.Helper()
		return mustTake(t, ctx, c.RWMutex("shares", append(opts, dlock.WithAutoRefresh(false))...).TryRLock)
	}
	// The first share is a lone reader's, kept in the owner key with a
	// TTL of its own; the others are kept in the readers' keys.
	lone := rlock(dlock.WithTTL(time.Hour))
	checkTTL(t, rdb, "a lone reader", keys.For(dlock.DefaultPrefix, keys.KindRW, "shares").Key(), time.Hour)
	short := rlock(dlock.WithTTL(10 * time.Second))
	expect("one share of 10s", 10*time.Second)
	long := rlock(dlock.WithTTL(time.Minute))
	expect("a share of 1m joins", time.Minute)
	shorter := rlock(dlock.WithTTL(5 * time.Second))
	expect("a share of 5s joins", time.Minute)
	mustUnlock(t, long)
	expect("the 1m share left", 10*time.Second)
	forever := rlock(dlock.WithNoExpiry())
	expect("a share that never expires joins", -1)
	again := rlock(dlock.WithTTL(20 * time.Second))
	expect("a share of 20s joins it", -1)
	mustUnlock(t, forever)
	expect("the share that never expires left", 20*time.Second)
	mustUnlock(t, short, shorter, again, lone)
}

// TestLoneReader: a reader alone keeps its share in the owner key (no
// readers' keys are made), Status shows it as a reader, and a reader
// that comes while it holds keeps its share in the readers' keys. A
// writer waits for both and is handed the lock by the last to leave,
// whichever order they leave in: the lone reader's release must look at
// the other shares, and the other share's release at the owner key.
func TestLoneReader(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	wc, _, _ := newClient(t, srv)
	for _, loneFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("lone reader leaves first: ", loneFirst), func(t *testing.T) {
			name := fmt.Sprint("lone-", loneFirst)
			k := keys.For(dlock.DefaultPrefix, keys.KindRW, name)
			rw := c.RWMutex(name, dlock.WithMetadata("lone"), dlock.WithTTL(30*time.Second))
			lone := mustTake(t, ctx, rw.TryRLock)
			if n, err := rdb.Exists(ctx, k.Part("readers"), k.Part("rexp"), k.Part("rmeta")).Result(); err != nil || n != 0 {
				t.Fatalf("readers' keys of a lone reader: %d, %v; want none", n, err)
			}
			st, err := rw.Status(ctx)
			if err != nil || !st.Held || !st.Since.IsZero() || len(st.Readers) != 1 ||
				st.Readers[0].Fence != lone.Fence() || st.Readers[0].Metadata != "lone" || st.Readers[0].TTL <= 0 {
				t.Fatalf("status with a lone reader: %+v, %v; want it as the one reader, and no writer", st, err)
			}
			other := mustTake(t, ctx, c.RWMutex(name, dlock.WithTTL(30*time.Second)).TryRLock)
			if other.Fence() <= lone.Fence() {
				t.Errorf("fences %d then %d; want them rising", lone.Fence(), other.Fence())
			}
			if n, err := rdb.Exists(ctx, k.Part("readers")).Result(); err != nil || n != 1 {
				t.Fatalf("readers' keys beside a lone reader: %d, %v; want them", n, err)
			}
			if st, err := rw.Status(ctx); err != nil || len(st.Readers) != 2 || st.Readers[0].Fence != lone.Fence() {
				t.Fatalf("status with two readers: %+v, %v; want both, the lone one first", st, err)
			}
			wrote := make(chan *dlock.Lease, 1)
			go func() {
				l, err := wc.RWMutex(name).Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				wrote <- l
			}()
			waitWriterWaiting(t, rw)
			first, last := lone, other
			if !loneFirst {
				first, last = other, lone
			}
			mustUnlock(t, first)
			select {
			case <-wrote:
				t.Fatal("the writer got in while a reader held the lock")
			case <-time.After(300 * time.Millisecond):
			}
			mustUnlock(t, last)
			select {
			case w := <-wrote:
				if w != nil && w.Fence() <= other.Fence() {
					t.Errorf("writer's fence %d; want it above the readers' (%d)", w.Fence(), other.Fence())
				}
				mustUnlock(t, w)
			case <-time.After(5 * time.Second):
				t.Fatal("the writer was not handed the lock when the last reader left")
			}
		})
	}
}

func TestRWRoundTrips(t *testing.T) {
	srv, ctx := serve(t)
	c, _, cnt := newClient(t, srv)
	rw := c.RWMutex("rt")
	for name, try := range map[string]func(context.Context) (*dlock.Lease, error){"TryRLock": rw.TryRLock, "TryLock": rw.TryLock} {
		// The first run of each script pays a NOSCRIPT fallback.
		for round := range 2 {
			before := cnt.Load()
			l, err := try(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if n := cnt.Load() - before; round == 1 && n != 2 {
				t.Errorf("%s+Unlock sent %d commands, want 2", name, n)
			}
		}
	}
}

func TestRWExclusionGoroutines(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c1, _, _ := newClient(t, srv)
	c2, _, _ := newClient(t, srv)
	m := &rwMarkers{dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	var events []rwEvent
	record := func(e rwEvent) { mu.Lock(); events = append(events, e); mu.Unlock() }
	errs := make(chan error, 2)
	for _, c := range []*dlock.Client{c1, c2} {
		go func() { errs <- rwMix(ctx, c, "shared", m, 4, 1, record) }()
	}
	if err := errors.Join(<-errs, <-errs); err != nil {
		t.Fatal(err)
	}
	reads, writes := checkRWFences(t, events)
	if reads < 8 || writes < 2 {
		t.Errorf("%d reads and %d writes in 3s; want at least 8 and 2", reads, writes)
	}
	if most := m.most.Load(); most < 2 {
		t.Errorf("at most %d readers at once; readers must overlap", most)
	}
	t.Logf("%d reads, %d writes, up to %d readers at once", reads, writes, m.most.Load())
}

func TestRWExclusionProcesses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	markers := filepath.Join(dir, "markers")
	if err := os.Mkdir(markers, 0o700); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "fences")
	const procs = 3
	runHelpers(t, procs,
		helperEnv+"=rwmix",
		"DLOCK_TEST_ADDR="+srv.Addr(),
		"DLOCK_TEST_MARKER="+markers,
		"DLOCK_TEST_LOG="+log,
		"DLOCK_TEST_FOR=3s",
	)
	events := readRWEvents(t, log)
	reads, writes := checkRWFences(t, events)
	if reads < procs || writes < procs {
		t.Errorf("%d reads and %d writes across %d processes", reads, writes, procs)
	}
	t.Logf("%d reads, %d writes across %d processes", reads, writes, procs)
}

func readRWEvents(t *testing.T, path string) []rwEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []rwEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kind, num, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil || (kind != "r" && kind != "w") {
			t.Fatalf("bad line %q", sc.Text())
		}
		events = append(events, rwEvent{kind == "w", n})
	}
	return events
}

// rwMixHelper is the body of a contender process of
// TestRWExclusionProcesses: two readers and a writer.
func rwMixHelper() int {
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
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	defer rdb.Close()
	c := dlock.New(rdb)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m := &rwMarkers{dir: os.Getenv("DLOCK_TEST_MARKER")}
	err = rwMix(ctx, c, "shared", m, 2, 1, func(e rwEvent) {
		kind := "r"
		if e.write {
			kind = "w"
		}
		// One write per line with O_APPEND, inside the critical section.
		fmt.Fprintf(log, "%s %d\n", kind, e.fence)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// rwWriteForever waits for the write side of an RWMutex until killed.
func rwWriteForever() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	c := dlock.New(rdb)
	_, err := c.RWMutex(os.Getenv("DLOCK_TEST_NAME")).Lock(context.Background())
	fmt.Fprintln(os.Stderr, "rwWriteForever: Lock returned", err)
	return 1
}

// readLoop runs n readers of lock name that each hold a read share for
// hold and take the next at once, started hold/n apart so that their
// shares always overlap. It stops when ctx ends and reports the number of
// shares taken.
func readLoop(ctx context.Context, c *dlock.Client, name string, mode dlock.RWMode, n int, hold time.Duration) (wait func() (int64, error)) {
	var taken atomic.Int64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(i) * hold / time.Duration(n)):
			}
			rw := c.RWMutex(name, dlock.WithRWMode(mode))
			for ctx.Err() == nil {
				l, err := rw.RLock(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errs[i] = err
					}
					return
				}
				taken.Add(1)
				select {
				case <-ctx.Done():
				case <-time.After(hold):
				}
				if err := l.Unlock(context.WithoutCancel(ctx)); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	return func() (int64, error) {
		wg.Wait()
		return taken.Load(), errors.Join(errs...)
	}
}

// TestRWPreferWriters: four readers keep overlapping 80ms shares; a
// PreferWriters writer still gets in, once the shares it found end.
func TestRWPreferWriters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rc, _, _ := newClient(t, srv)
	wc, _, _ := newClient(t, srv)
	ctx, stop := context.WithCancel(t.Context())
	wait := readLoop(ctx, rc, "busy", dlock.PreferWriters, 4, 80*time.Millisecond)
	time.Sleep(300 * time.Millisecond)

	start := time.Now()
	wctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	w, err := wc.RWMutex("busy").Lock(wctx)
	waited := time.Since(start)
	if err != nil {
		t.Errorf("writer not in within 2s of overlapping readers: %v", err)
	} else {
		st, serr := wc.RWMutex("busy").Status(t.Context())
		if serr != nil || len(st.Readers) != 0 {
			t.Errorf("status while the writer holds: %+v, %v", st, serr)
		}
		if err := w.Unlock(t.Context()); err != nil {
			t.Error(err)
		}
		t.Logf("writer got in after %v", waited.Round(time.Millisecond))
	}
	time.Sleep(200 * time.Millisecond) // readers resume after the writer
	stop()
	n, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Errorf("readers took only %d shares", n)
	}
}

// TestRWPreferReaders: while four readers keep overlapping, a writer
// waits if the readers use PreferReaders (they ignore its intention) or
// the writer does (it registers none). Once the readers stop, the last
// one's release lets it in.
func TestRWPreferReaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name            string
		readers, writer dlock.RWMode
	}{
		{"readers prefer readers", dlock.PreferReaders, dlock.PreferWriters},
		{"writer prefers readers", dlock.PreferWriters, dlock.PreferReaders},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, _ := newClient(t, srv)
			wc, _, _ := newClient(t, srv)
			name := "busy-" + tc.name
			ctx, stop := context.WithCancel(t.Context())
			defer stop()
			wait := readLoop(ctx, rc, name, tc.readers, 4, 80*time.Millisecond)
			time.Sleep(300 * time.Millisecond)

			rw := wc.RWMutex(name, dlock.WithRWMode(tc.writer))
			got := make(chan error, 1)
			wctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() {
				w, err := rw.Lock(wctx)
				if err == nil {
					err = w.Unlock(t.Context())
				}
				got <- err
			}()
			select {
			case err := <-got:
				t.Fatalf("writer got in beside overlapping readers (err %v)", err)
			case <-time.After(time.Second):
			}
			st, err := rw.Status(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.writer == dlock.PreferWriters; st.WriterWaiting != want || len(st.Readers) == 0 {
				t.Errorf("status while the writer waits: %+v; want WriterWaiting %v and readers", st, want)
			}
			stopped := time.Now()
			stop()
			n, err := wait()
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("readers took %d shares; writer in %v after they stopped", n, time.Since(stopped).Round(time.Millisecond))
			case <-time.After(2 * time.Second):
				t.Fatal("writer not in within 2s after the readers stopped")
			}
		})
	}
}

// TestRWReaderExpiry: a reader that stops renewing loses its own share
// when its TTL runs out; a live reader beside it keeps its share.
func TestRWReaderExpiry(t *testing.T) {
	c, ctx := start(t)
	const ttl = 500 * time.Millisecond
	dead, err := c.RWMutex("exp", dlock.WithTTL(ttl), dlock.WithAutoRefresh(false), dlock.WithMetadata("dead")).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live, err := c.RWMutex("exp", dlock.WithTTL(ttl), dlock.WithMetadata("live")).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-dead.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() of the reader that stopped renewing did not close")
	}
	time.Sleep(ttl) // past the dead share's expiry on the server too
	if held, err := dead.Held(ctx); err != nil || held {
		t.Errorf("expired reader: Held = %v, %v; want false", held, err)
	}
	if held, err := live.Held(ctx); err != nil || !held {
		t.Errorf("live reader: Held = %v, %v; want true", held, err)
	}
	select {
	case <-live.Lost():
		t.Error("the live reader's Lost() closed")
	default:
	}
	st, err := c.RWMutex("exp").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Readers) != 1 || st.Readers[0].Metadata != "live" || st.Readers[0].Fence != live.Fence() || st.Readers[0].TTL <= 0 {
		t.Errorf("status: %+v; want only the live reader", st)
	}
	if _, err := c.RWMutex("exp").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock beside the live reader: %v", err)
	}
	if err := dead.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock of the expired share: %v, want ErrLost", err)
	}
	if err := live.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := c.RWMutex("exp").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with no share left: %v", err)
	}
	w.Unlock(ctx)
}

// waitWriterWaiting waits until the RWMutex's status shows a waiting
// writer.
func waitWriterWaiting(t *testing.T, rw *dlock.RWMutex) {
	t.Helper()
	err := eventually(t.Context(), 5*time.Second, func() error {
		if st := statusOf(t, rw); !st.WriterWaiting {
			return fmt.Errorf("no writer waiting: %+v", st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRWDeadWriterIntention: a writer process waiting behind a reader is
// SIGKILLed; its intention stops new readers only until it lapses (3s).
func TestRWDeadWriterIntention(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	rw := c.RWMutex("dead-writer", dlock.WithTTL(30*time.Second))
	r := mustTake(t, ctx, rw.RLock)
	defer r.Unlock(ctx)

	doomed := startHelper(t, srv, "rwwrite", "dead-writer")
	waitWriterWaiting(t, rw)
	if _, err := rw.TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryRLock while a writer waits: %v, want ErrNotAcquired", err)
	}
	if err := doomed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-doomed.exited
	killed := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r2, err := rw.RLock(rctx)
	if err != nil {
		t.Fatalf("reader after the writer died: %v", err)
	}
	defer r2.Unlock(ctx)
	if d := time.Since(killed); d > 3*time.Second+time.Second {
		t.Errorf("reader got in %v after the writer died; its intention lives 3s", d)
	} else {
		t.Logf("reader got in %v after the writer died", d.Round(time.Millisecond))
	}
	if st, err := rw.Status(ctx); err != nil || st.WriterWaiting || len(st.Readers) != 2 {
		t.Errorf("status: %+v, %v; want two readers, no writer waiting", st, err)
	}
}

// TestRWWriterGivesUp: a writer waiting behind a reader holds back a new
// reader; when the writer's ctx ends, it withdraws its intention and the
// reader gets in at once, not when the intention would have lapsed.
func TestRWWriterGivesUp(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	rc, _, _ := newClient(t, srv)
	rw := c.RWMutex("gives-up", dlock.WithTTL(30*time.Second))
	r := mustTake(t, ctx, rw.RLock)
	defer r.Unlock(ctx)
	wctx, cancel := context.WithCancel(ctx)
	wrote := make(chan error, 1)
	go func() {
		_, err := rw.Lock(wctx)
		wrote <- err
	}()
	waitWriterWaiting(t, rw)
	read := make(chan error, 1)
	go func() {
		l, err := rc.RWMutex("gives-up").RLock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("reader got in while a writer waited (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	gaveUp := time.Now()
	if err := <-wrote; !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("writer: %v, want ErrNotAcquired and context.Canceled", err)
	}
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(gaveUp); d > time.Second {
			t.Errorf("reader got in %v after the writer gave up; want a wake-up, not the 3s lapse", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reader still waiting 5s after the writer gave up")
	}
	if st, err := rw.Status(ctx); err != nil || st.WriterWaiting {
		t.Errorf("status: %+v, %v; want no writer waiting", st, err)
	}
}

// TestRWStallTimeout: a writer behind a stuck reader gives up after the
// stall timeout, and withdraws its intention.
func TestRWStallTimeout(t *testing.T) {
	c, ctx := start(t)
	const stall = 300 * time.Millisecond
	r := mustTake(t, ctx, c.RWMutex("stuck", dlock.WithTTL(time.Minute)).RLock)
	defer r.Unlock(ctx)
	givesUpOnStall(t, "Lock", stall, func() error {
		_, err := c.RWMutex("stuck", dlock.WithStallTimeout(stall)).Lock(ctx)
		return err
	})
	r2, err := c.RWMutex("stuck").TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock after the writer gave up: %v", err)
	}
	r2.Unlock(ctx)
}

// TestRWWakeups: a writer's release wakes every waiting reader; the last
// reader's release wakes a waiting writer; both long before the 30s
// leases would run out, and waiting costs few commands.
func TestRWWakeups(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	rw := c.RWMutex("wake", dlock.WithTTL(30*time.Second))

	t.Run("writer release wakes readers", func(t *testing.T) {
		w := mustTake(t, ctx, rw.Lock)
		const n = 6
		clients := make([]*dlock.Client, 2)
		counters := make([]*hook, 2)
		for i := range clients {
			clients[i], _, counters[i] = newClient(t, srv)
		}
		got := make(chan *dlock.Lease, n)
		errs := make(chan error, n)
		for i := range n {
			go func() {
				l, err := clients[i%2].RWMutex("wake", dlock.WithTTL(30*time.Second)).RLock(ctx)
				if err != nil {
					errs <- err
					return
				}
				got <- l
			}()
		}
		time.Sleep(1500 * time.Millisecond)
		if sent := counters[0].Load() + counters[1].Load(); sent > 3*n {
			t.Errorf("%d waiting readers sent %d commands in 1.5s: %s %s", n, sent, counters[0], counters[1])
		}
		released := time.Now()
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		var leases []*dlock.Lease
		for range n {
			select {
			case l := <-got:
				leases = append(leases, l)
			case err := <-errs:
				t.Fatal(err)
			case <-time.After(5 * time.Second):
				t.Fatalf("%d of %d readers woken by the release", len(leases), n)
			}
		}
		t.Logf("%d readers in within %v of the release", n, time.Since(released).Round(time.Millisecond))
		for _, l := range leases {
			l.Unlock(ctx)
		}
	})

	// Only the release can let the writer in before the readers' 30s
	// leases run out.
	for _, mode := range []dlock.RWMode{dlock.PreferWriters, dlock.PreferReaders} {
		t.Run("last reader release wakes writer/"+mode.String(), func(t *testing.T) {
			var rs []*dlock.Lease
			for range 3 {
				r := mustTake(t, ctx, rw.RLock)
				rs = append(rs, r)
			}
			wc, _, cnt := newClient(t, srv)
			got := takeAndRelease(ctx, wc.RWMutex("wake", dlock.WithRWMode(mode)).Lock)
			if mode == dlock.PreferWriters {
				waitWriterWaiting(t, rw)
			}
			for _, r := range rs[:2] {
				r.Unlock(ctx)
			}
			select {
			case err := <-got:
				t.Fatalf("writer got in beside a reader (err %v)", err)
			case <-time.After(1500 * time.Millisecond):
			}
			// A first try and a retry after subscribing, and a try per
			// heartbeat (1s) that renews the writer's place in line.
			if n := cnt.Load(); n > 5 {
				t.Errorf("waiting writer sent %d commands in 1.5s: %s", n, cnt)
			}
			released := time.Now()
			rs[2].Unlock(ctx)
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				if d := time.Since(released); d > 500*time.Millisecond {
					t.Errorf("writer in %v after the last reader left; want a wake-up", d)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("writer not woken by the last reader's release")
			}
		})
	}
}

// TestRWLostOnFlush: a reader's keys vanish; Lost() closes and the read
// side's Do cancels its context with cause ErrLost, within the TTL.
func TestRWLostOnFlush(t *testing.T) {
	srv, ctx := serve(t)
	c, rdb, _ := newClient(t, srv)
	const ttl = 900 * time.Millisecond
	rw := c.RWMutex("flush", dlock.WithTTL(ttl))
	other := mustTake(t, ctx, rw.RLock)
	err := rw.RLocker().Do(ctx, flushInside(t, rdb, ttl))
	if !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Do = %v, want the unlock's ErrLost", err)
	}
	select {
	case <-other.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() of the other reader did not close")
	}
	if err := other.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock after the flush: %v, want ErrLost", err)
	}
}

func TestRWBadInput(t *testing.T) {
	c, ctx := start(t)
	cases := map[string]*dlock.RWMutex{
		"empty name":      c.RWMutex(""),
		"over-long name":  c.RWMutex(strings.Repeat("x", 4097)),
		"zero TTL":        c.RWMutex("a", dlock.WithTTL(0)),
		"unknown RW mode": c.RWMutex("a", dlock.WithRWMode(dlock.RWMode(7))),
		"nil client":      dlock.New(nil).RWMutex("a"),
	}
	for name, rw := range cases {
		calls := map[string]func() error{
			"TryLock":  func() error { _, err := rw.TryLock(ctx); return err },
			"Lock":     func() error { _, err := rw.Lock(ctx); return err },
			"TryRLock": func() error { _, err := rw.TryRLock(ctx); return err },
			"RLock":    func() error { _, err := rw.RLock(ctx); return err },
			"Status":   func() error { _, err := rw.Status(ctx); return err },
			"RLocker().Do": func() error {
				return rw.RLocker().Do(ctx, func(context.Context) error { return nil })
			},
		}
		for call, f := range calls {
			if err := f(); !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("%s: %s: %v, want ErrInvalid", name, call, err)
			}
		}
	}
}

// TestRWRetriedAcquireIsIdempotent: go-redis may send a script again after
// a lost reply; the second run must recognise the token of the first, or
// TryLock would fail against its own orphan lease and TryRLock would leave
// an orphan share behind.
func TestRWRetriedAcquireIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := &hook{match: isTry, act: sentTwice(false)}
	c, _ := hooked(t, srv, h)
	ctx := t.Context()
	rw := c.RWMutex("retried", dlock.WithTTL(5*time.Second))
	for name, try := range map[string]func(context.Context) (*dlock.Lease, error){"TryLock": rw.TryLock, "TryRLock": rw.TryRLock} {
		warm, err := try(ctx) // load the script (EVALSHA would NOSCRIPT)
		if err != nil {
			t.Fatal(err)
		}
		warm.Unlock(ctx)
		h.armed.Store(true)
		l, err := try(ctx)
		if err != nil {
			t.Errorf("%s run twice: %v", name, err)
			continue
		}
		st, err := rw.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if name == "TryRLock" && (len(st.Readers) != 1 || st.Readers[0].Fence != l.Fence()) {
			t.Errorf("%s run twice: readers %+v; want only the lease's share, fence %d", name, st.Readers, l.Fence())
		}
		if name == "TryLock" && st.Fence != l.Fence() {
			t.Errorf("%s run twice: writer's fence %d, lease's %d", name, st.Fence, l.Fence())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestReaderWokenAfterHandedWriterDies: a reader waits behind a
// writer that never expires (its refusal says: only when woken), or
// whose lease has a minute left (its refusal says: in a minute). That
// writer's release hands the lock to a waiting writer, which wakes no
// reader; the new writer then dies (its lease lapses, nobody releases).
// The reader must get in once the dead writer's lease has run out, not
// sleep for ever, nor until the first writer's lease would have ended.
func TestReaderWokenAfterHandedWriterDies(t *testing.T) {
	for _, first := range []struct {
		name string
		opt  dlock.LockOption
	}{{"no-expiry", dlock.WithNoExpiry()}, {"ttl=1m", dlock.WithTTL(time.Minute)}} {
		for _, mode := range []dlock.RWMode{dlock.PreferReaders, dlock.PreferWriters} {
			t.Run(first.name+"/"+mode.String(), func(t *testing.T) {
				readerWokenAfterHandedWriterDies(t, first.opt, mode)
			})
		}
	}
}

func readerWokenAfterHandedWriterDies(t *testing.T, first dlock.LockOption, mode dlock.RWMode) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	c2, _, _ := newClient(t, srv)
	c3, _, _ := newClient(t, srv)
	w0 := mustTake(t, ctx, c.RWMutex("h", first).Lock)

	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	read := make(chan error, 1)
	go func() {
		l, err := c3.RWMutex("h", dlock.WithRWMode(mode)).RLock(rctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		read <- err
	}()
	time.Sleep(300 * time.Millisecond) // the reader's try is refused

	// A writer that will "die" once it has the lock: it never renews
	// after its first renewal and never unlocks.
	wrote := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c2.RWMutex("h", dlock.WithTTL(500*time.Millisecond), dlock.WithAutoRefresh(false)).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		wrote <- l
	}()
	waitWriterWaiting(t, c.RWMutex("h"))
	mustUnlock(t, w0)
	w2 := <-wrote
	start := time.Now()
	select {
	case <-w2.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the dying writer's lease not lost")
	}
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("reader: %v (after %v)", err, time.Since(start))
		}
		t.Logf("reader in %v after the writer got the lock", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("reader still waiting 10s after the handed-over writer's lease lapsed")
	}
}

// TestReaderWokenAfterFlush: a reader waits behind a writer that
// never expires; the writer's key vanishes (FLUSHALL) with no release
// announced. Writers waiting notice at their next heartbeat; the reader,
// which has none, must not sleep for ever either: it looks again every
// 3s (README), also when its stall timeout is longer.
func TestReaderWokenAfterFlush(t *testing.T) {
	for name, opts := range map[string][]dlock.LockOption{
		"no stall timeout":    nil,
		"stall timeout of 1m": {dlock.WithStallTimeout(time.Minute)},
	} {
		t.Run(name, func(t *testing.T) {
			srv, ctx := serve(t)
			c, rdb, _ := newClient(t, srv)
			c3, _, _ := newClient(t, srv)
			mustTake(t, ctx, c.RWMutex("f", dlock.WithNoExpiry()).Lock)
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			read := make(chan error, 1)
			go func() {
				l, err := c3.RWMutex("f", opts...).RLock(rctx)
				if err == nil {
					err = l.Unlock(ctx)
				}
				read <- err
			}()
			time.Sleep(300 * time.Millisecond)
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-read:
				if err != nil {
					t.Fatalf("reader: %v", err)
				}
			case <-time.After(6 * time.Second):
				t.Fatal("reader still waiting 6s after the lock was freed by FLUSHALL")
			}
		})
	}
}
