package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// helperEnv names the variable that turns the test binary into a lock
// contender process (see runHelper).
const helperEnv = "DLOCK_TEST_HELPER"

// helperProcess is the test binary run as a helper (see runHelper);
// exited closes once it has ended.
type helperProcess struct {
	*exec.Cmd
	exited chan struct{}
}

// startHelper starts the helper called mode on the lock called name of
// srv; it is killed, and waited for, when t ends.
func startHelper(t *testing.T, srv *redistest.Server, mode, name string) helperProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "DLOCK_TEST_ADDR="+srv.Addr(), "DLOCK_TEST_NAME="+name)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := helperProcess{cmd, make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.exited })
	return p
}

// lockers builds the lock under test on a client; the exclusion tests run
// for each kind.
var lockers = map[string]func(c *dlock.Client, name string) dlock.Locker{
	"mutex": func(c *dlock.Client, name string) dlock.Locker { return c.Mutex(name, dlock.WithTTL(5*time.Second)) },
	"fair": func(c *dlock.Client, name string) dlock.Locker {
		return c.FairMutex(name, dlock.WithTTL(5*time.Second))
	},
	"rw": func(c *dlock.Client, name string) dlock.Locker { return c.RWMutex(name, dlock.WithTTL(5*time.Second)) },
	"semaphore": func(c *dlock.Client, name string) dlock.Locker {
		return onePermit{c.Semaphore(name, 1, dlock.WithTTL(5*time.Second))}
	},
	"election": func(c *dlock.Client, name string) dlock.Locker {
		return campaigner{c.Election(name, dlock.WithTTL(5*time.Second))}
	},
}

// errOverlap reports that two holders were inside the critical section at
// once.
var errOverlap = errors.New("two holders at once")

// critical runs one critical section guarded by an O_EXCL marker file,
// which lives outside Redis: creating it fails if another holder is inside.
func critical(marker string, hold time.Duration, record func()) error {
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return errOverlap
		}
		return err
	}
	f.Close()
	record()
	time.Sleep(hold)
	return os.Remove(marker)
}

// contend locks l repeatedly until ctx ends, recording each fence.
func contend(ctx context.Context, l dlock.Locker, marker string, hold time.Duration, record func(uint64)) (int, error) {
	n := 0
	for ctx.Err() == nil {
		lease, err := l.Lock(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, err
		}
		err = critical(marker, hold, func() { record(lease.Fence()) })
		uerr := lease.Unlock(context.WithoutCancel(ctx))
		if err != nil {
			return n, err
		}
		if uerr != nil {
			return n, fmt.Errorf("unlock: %w", uerr)
		}
		n++
	}
	return n, nil
}

func checkIncreasing(t *testing.T, fences []uint64) {
	t.Helper()
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d at acquisition %d is not above %d before it", fences[i], i, fences[i-1])
		}
	}
}

func TestExclusionGoroutines(t *testing.T) {
	for kind, mk := range lockers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c, _, _ := newClient(t, srv)
			marker := filepath.Join(t.TempDir(), "held")
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()

			var mu sync.Mutex
			var fences []uint64
			record := func(f uint64) { mu.Lock(); fences = append(fences, f); mu.Unlock() }
			const workers = 16
			errs := make([]error, workers)
			counts := make([]int, workers)
			var wg sync.WaitGroup
			for i := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					counts[i], errs[i] = contend(ctx, mk(c, "shared"), marker, time.Millisecond, record)
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if len(fences) < workers {
				t.Fatalf("only %d acquisitions in 3s", len(fences))
			}
			checkIncreasing(t, fences)
			t.Logf("%d acquisitions, per goroutine %v", len(fences), counts)
		})
	}
}

func TestExclusionProcesses(t *testing.T) {
	for kind := range lockers {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			runContenders(t, srv.Addr(), kind)
		})
	}
}

// runContenders runs 3 contender processes of 4 goroutines each for 3s on
// the lock of the given kind at addr (for kind redlock, comma-separated
// masters) and checks that they never overlapped and that fences rose.
func runContenders(t *testing.T, addr, kind string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "fences")
	const procs = 3
	runHelpers(t, procs,
		helperEnv+"=contend",
		"DLOCK_TEST_ADDR="+addr,
		"DLOCK_TEST_KIND="+kind,
		"DLOCK_TEST_MARKER="+filepath.Join(dir, "held"),
		"DLOCK_TEST_LOG="+log,
		"DLOCK_TEST_FOR=3s",
		"DLOCK_TEST_GOROUTINES=4",
	)
	fences := readFences(t, log)
	if len(fences) < procs {
		t.Fatalf("only %d acquisitions across %d processes", len(fences), procs)
	}
	checkIncreasing(t, fences)
	t.Logf("%d acquisitions across %d processes", len(fences), procs)
}

// runHelpers runs procs copies of the test binary as helper processes
// with env added to theirs, waits for them, and reports any that failed
// with its output.
func runHelpers(t *testing.T, procs int, env ...string) {
	t.Helper()
	cmds := make([]*exec.Cmd, procs)
	outs := make([]strings.Builder, procs)
	for i := range cmds {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("contender %d: %v\n%s", i, err, outs[i].String())
		}
	}
}

func readFences(t *testing.T, path string) []uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var fences []uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			t.Fatalf("bad fence line %q", sc.Text())
		}
		fences = append(fences, n)
	}
	return fences
}

// runHelper is the body of a contender process; it returns the exit code.
func runHelper(mode string) int {
	switch mode {
	case "contend":
	case "queue":
		return queueForever()
	case "rwmix":
		return rwMixHelper()
	case "rwwrite":
		return rwWriteForever()
	case "faults":
		return faultWorker()
	case "semcontend":
		return semContendHelper()
	case "semhold", "semqueue":
		return semHelper(mode)
	case "elect":
		return electHelper()
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 2
	}
	d, err := time.ParseDuration(os.Getenv("DLOCK_TEST_FOR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	goroutines, _ := strconv.Atoi(os.Getenv("DLOCK_TEST_GOROUTINES"))
	kind := os.Getenv("DLOCK_TEST_KIND")
	mk := lockers[kind]
	if kind == "redlock" {
		mk = lockers["mutex"]
	}
	log, err := os.OpenFile(os.Getenv("DLOCK_TEST_LOG"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer log.Close()
	c, closeClient := helperClient(kind)
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()

	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = contend(ctx, mk(c, "shared"), os.Getenv("DLOCK_TEST_MARKER"), time.Millisecond, func(f uint64) {
				// One write per line with O_APPEND, inside the critical
				// section: the file's order is the acquisition order.
				fmt.Fprintf(log, "%d\n", f)
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// queueForever joins the queue of a fair mutex and waits until killed.
func queueForever() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	c := dlock.New(rdb)
	_, err := c.FairMutex(os.Getenv("DLOCK_TEST_NAME"), dlock.WithMetadata("doomed")).Lock(context.Background())
	fmt.Fprintln(os.Stderr, "queueForever: Lock returned", err)
	return 1
}

// TestShortLeasesLastTheirTTL: a read share, a Semaphore lease, a MutexSet
// member and a Mutex last on the server at least their TTL from the try
// that took them, however near
// the end of a millisecond it ran: nobody else gets in while the holder
// may still count on it (its Lost() closes a quarter of a 1ms TTL early).
func TestShortLeasesLastTheirTTL(t *testing.T) {
	const ttl, rounds = time.Millisecond, 2000
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	short := []dlock.LockOption{dlock.WithTTL(ttl), dlock.WithAutoRefresh(false)}
	for _, k := range []struct {
		name          string
		first, second func(name string) (*dlock.Lease, error)
	}{
		{"RWMutex",
			func(name string) (*dlock.Lease, error) { return c.RWMutex(name, short...).TryRLock(ctx) },
			func(name string) (*dlock.Lease, error) { return c.RWMutex(name).TryLock(ctx) }},
		{"Semaphore",
			func(name string) (*dlock.Lease, error) { return c.Semaphore(name, 1, short...).TryAcquire(ctx, 1) },
			func(name string) (*dlock.Lease, error) { return c.Semaphore(name, 1).TryAcquire(ctx, 1) }},
		{"MutexSet",
			func(name string) (*dlock.Lease, error) {
				s := c.MutexSet(name, short...)
				if err := s.Add(ctx, "only"); err != nil {
					return nil, err
				}
				return s.TryAcquire(ctx)
			},
			func(name string) (*dlock.Lease, error) { return c.MutexSet(name).TryAcquire(ctx) }},
		{"Mutex",
			func(name string) (*dlock.Lease, error) { return c.Mutex(name, short...).TryLock(ctx) },
			func(name string) (*dlock.Lease, error) { return c.Mutex(name).TryLock(ctx) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			early, worst, taken := 0, time.Duration(0), 0
			for i := range rounds {
				name := fmt.Sprint("short-", i)
				sent := time.Now()
				l, err := k.first(name)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					continue // its reply came too late for so short a lease
				}
				if err != nil {
					t.Fatal(err)
				}
				taken++
				for {
					next, err := k.second(name)
					if err == nil {
						// Taken by now at the latest: before the first
						// holder's count of its TTL ran out is too early.
						if in := time.Since(sent); in < ttl*3/4 {
							early, worst = early+1, max(worst, ttl*3/4-in)
						}
						mustUnlock(t, next)
						break
					}
					if !errors.Is(err, dlock.ErrNotAcquired) {
						t.Fatal(err)
					}
				}
				_ = l.Unlock(ctx) // gone by now
			}
			if taken < rounds/4 {
				t.Fatalf("only %d of %d leases of %v taken: their replies came too late", taken, rounds, ttl)
			}
			if early > 0 {
				t.Errorf("in %d of %d rounds another took the lock while a %v lease could still be counted on (at worst %v before)", early, taken, ttl, worst)
			}
		})
	}
}
