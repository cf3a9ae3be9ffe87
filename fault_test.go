package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// The fault-injection run: worker processes contend for every primitive
// while the test pauses and kills holders, pauses Redis, kills its
// connections, and restarts it with and without its data. Every holder
// writes to a resource, outside Redis, that checks fences. The run reports
// per fault the acquisitions, the overlaps (two holders inside at once),
// the writes the fence rejected, the leases seen lost, and the longest
// time the resource went without a new holder.
//
// CI runs each fault once, for 2s; `make faults` runs each for a minute
// (DLOCK_FAULT_PHASE=60s), injecting it every 5s, and prints the table
// that the README's GUARANTEES quotes.

const (
	faultTTL        = time.Second
	faultProcs      = 4
	faultHold       = 2 * time.Millisecond
	faultPhaseCI    = 2 * time.Second
	faultCycle      = 5 * time.Second // between injections, in longer runs
	faultStallBound = 8 * time.Second // the longest a lock may go without a new holder
	faultSetMembers = 2
)

// faultResources are the locks the workers contend for, one goroutine per
// resource in each worker process. A set member is a resource of its own.
var faultResources = []string{"mutex", "fair", "rw", "set"}

// faultReport is what the resource saw during one fault.
type faultReport struct {
	fault        string
	injected     int // times the fault was injected
	acquisitions int
	overlaps     int // holders that another entered on while they were inside
	unfenced     int // overlaps whose older holder had not seen Lost()
	stale        int // writes refused for a fence below one already seen
	lost         int // holders that saw Lost() before writing
	longestStall time.Duration
	details      []string // the first overlaps, for the log
}

// resource is the protected resource: it remembers the highest fence it
// has seen per lock and refuses writes below it, and it counts overlaps.
type resource struct {
	ln net.Listener
	mu sync.Mutex
	r  faultReport
	// per resource name: the last fence seen, who is inside (by holder id,
	// with their fence), and when the last holder entered.
	last       map[string]uint64
	inside     map[string]map[string]uint64
	since      map[string]time.Time // when each holder inside entered
	entry      map[string]time.Time
	overlapped map[string]bool // holders counted in overlaps
}

func startResource(t *testing.T) *resource {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &resource{ln: ln, last: map[string]uint64{}, inside: map[string]map[string]uint64{},
		since: map[string]time.Time{}, entry: map[string]time.Time{}, overlapped: map[string]bool{}}
	go r.serve()
	t.Cleanup(func() { ln.Close() })
	return r
}

func (r *resource) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				fmt.Fprintln(c, r.handle(strings.Fields(sc.Text())))
			}
		}()
	}
}

// handle answers "enter RES FENCE ID" and "exit RES FENCE ID LOST" with
// OK, or STALE when the fence is below one already seen for RES.
func (r *resource) handle(f []string) string {
	if len(f) < 4 {
		return "BAD"
	}
	res, id := f[1], f[3]
	fence, _ := strconv.ParseUint(f[2], 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.inside[res]
	if in == nil {
		in = map[string]uint64{}
		r.inside[res] = in
	}
	switch f[0] {
	case "enter":
		now := time.Now()
		if e, ok := r.entry[res]; ok && now.Sub(e) > r.r.longestStall {
			r.r.longestStall = now.Sub(e)
		}
		r.entry[res] = now
		r.r.acquisitions++
		for resident, rf := range in {
			if !r.overlapped[resident] {
				r.overlapped[resident] = true
				r.r.overlaps++
				if len(r.r.details) < 5 {
					r.r.details = append(r.r.details, fmt.Sprintf("%s: %s (fence %d) entered while %s (fence %d) had been inside for %v",
						res, id, fence, resident, rf, now.Sub(r.since[resident]).Round(time.Millisecond)))
				}
			}
		}
		in[id] = fence
		r.since[id] = now
		if fence < r.last[res] {
			r.r.stale++
			return "STALE"
		}
		r.last[res] = fence
		return "OK"
	case "exit":
		delete(in, id)
		delete(r.since, id)
		if r.overlapped[id] {
			if len(r.r.details) < 10 {
				r.r.details = append(r.r.details, fmt.Sprintf("%s: %s (fence %d) left, lost=%s", res, id, fence, f[len(f)-1]))
			}
		}
		delete(r.overlapped, id)
		if len(f) > 4 && f[4] == "1" {
			r.r.lost++
			return "OK"
		}
		if fence < r.last[res] {
			// A later holder entered while this one was inside and did
			// not know it had lost: the fence catches its write.
			r.r.unfenced++
			r.r.stale++
			return "STALE"
		}
		return "OK"
	}
	return "BAD"
}

// forget drops the holders of a killed worker process: they never exit.
func (r *resource) forget(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prefix := strconv.Itoa(pid) + "/"
	for _, in := range r.inside {
		for id := range in {
			if strings.HasPrefix(id, prefix) {
				delete(in, id)
				delete(r.overlapped, id)
			}
		}
	}
}

// phase starts counting a new fault and returns the report of the last.
func (r *resource) phase(fault string) faultReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A lock that stopped changing hands stalls until now.
	for _, e := range r.entry {
		r.r.longestStall = max(r.r.longestStall, time.Since(e))
	}
	done := r.r
	r.r = faultReport{fault: fault}
	r.entry = map[string]time.Time{}
	return done
}

// faultWorkers runs the worker processes and can pause, kill and replace
// them.
type faultWorkers struct {
	t    *testing.T
	env  []string
	mu   sync.Mutex
	cmds []*exec.Cmd
}

func (w *faultWorkers) start() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), w.env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	w.cmds = append(w.cmds, cmd)
	w.mu.Unlock()
	return cmd
}

func (w *faultWorkers) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.cmds {
		_ = c.Process.Signal(syscall.SIGCONT)
		_ = c.Process.Kill()
		_ = c.Wait()
	}
}

// TestFaults is the fault-injection run.
func TestFaults(t *testing.T) {
	phase := faultPhaseCI
	if v := os.Getenv("DLOCK_FAULT_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		phase = d
	}
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	admin := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	addSet := func() {
		for i := range faultSetMembers {
			if err := dlock.New(admin).MutexSet("set").Add(t.Context(), fmt.Sprint("m", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	addSet()
	res := startResource(t)
	w := &faultWorkers{t: t, env: []string{helperEnv + "=faults", "DLOCK_TEST_ADDR=" + srv.Addr(), "DLOCK_TEST_RESOURCE=" + res.ln.Addr().String()}}
	for range faultProcs {
		w.start()
	}
	defer w.stopAll()

	// Each fault is injected again every cycle of its phase, a quarter
	// into the cycle; the rest of the cycle shows the recovery.
	faults := []struct {
		name   string
		inject func()
	}{
		{"none", func() {}},
		{"holder paused past its TTL (SIGSTOP)", func() {
			p := w.cmds[0].Process
			_ = p.Signal(syscall.SIGSTOP)
			time.Sleep(2 * faultTTL)
			_ = p.Signal(syscall.SIGCONT)
		}},
		{"holder killed (SIGKILL)", func() {
			w.mu.Lock()
			c := w.cmds[1]
			w.mu.Unlock()
			_ = c.Process.Kill()
			_ = c.Wait()
			res.forget(c.Process.Pid)
			w.start()
		}},
		{"Redis paused past the TTL (SIGSTOP)", func() {
			srv.Pause(t)
			time.Sleep(2 * faultTTL)
			srv.Resume(t)
		}},
		{"connections killed (CLIENT KILL)", func() {
			for range 3 {
				admin.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "yes")
				admin.ClientKillByFilter(t.Context(), "TYPE", "pubsub")
				time.Sleep(100 * time.Millisecond)
			}
		}},
		{"Redis killed, restarted with its AOF", func() {
			srv.Restart(t)
		}},
		{"Redis killed, restarted without data", func() {
			srv.RestartEmpty(t)
			addSet()
		}},
	}
	var reports []faultReport
	res.phase("start")
	time.Sleep(phase / 2) // workers connect and warm up
	cycle := min(phase, faultCycle)
	only := os.Getenv("DLOCK_FAULT_ONLY")
	for _, f := range faults {
		if only != "" && !strings.Contains(f.name, only) {
			continue
		}
		res.phase(f.name)
		end := time.Now().Add(phase)
		n := 0
		for n == 0 || time.Now().Add(cycle).Before(end) {
			time.Sleep(cycle / 4)
			f.inject()
			n++
			time.Sleep(cycle * 3 / 4)
		}
		r := res.phase("")
		r.injected = n
		reports = append(reports, r)
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "fault\tinjected\tacquisitions\toverlaps\tof them unseen\tstale writes rejected\tlost seen\tlongest stall\t\n")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t\n", r.fault, r.injected, r.acquisitions, r.overlaps, r.unfenced, r.stale, r.lost, r.longestStall.Round(time.Millisecond))
	}
	tw.Flush()
	t.Logf("%d worker processes × %d locks, TTL %v, hold %v, %v per fault:\n%s", faultProcs, len(faultResources), faultTTL, faultHold, phase, b.String())

	for _, r := range reports {
		for _, d := range r.details {
			t.Logf("%s: %s", r.fault, d)
		}
		if r.acquisitions == 0 {
			t.Errorf("%s: no acquisition: the locks did not recover", r.fault)
		}
		// A fault lasts at most 2×TTL; then a dead waiter ahead in a
		// queue costs 3s more, a dead holder its TTL.
		if r.longestStall > faultStallBound {
			t.Errorf("%s: a lock went %v without changing hands; want at most %v", r.fault, r.longestStall, faultStallBound)
		}
		keepsData := !strings.Contains(r.fault, "without data") && !strings.Contains(r.fault, "holder paused")
		if keepsData && r.overlaps > 0 {
			t.Errorf("%s: %d overlaps while Redis kept its data", r.fault, r.overlaps)
		}
	}
}

// faultWorker is the body of a worker process: one goroutine per
// resource (two per set, one per member), each taking its lock, entering
// the resource with its fence, holding, and leaving, until killed.
func faultWorker() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	c := dlock.New(rdb)
	ttl := dlock.WithTTL(faultTTL)
	id := strconv.Itoa(os.Getpid())
	var wg sync.WaitGroup
	work := func(res string, lock func(context.Context) (*dlock.Lease, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", os.Getenv("DLOCK_TEST_RESOURCE"))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return
			}
			rd := bufio.NewReader(conn)
			ask := func(format string, args ...any) string {
				fmt.Fprintf(conn, format+"\n", args...)
				line, _ := rd.ReadString('\n')
				return strings.TrimSpace(line)
			}
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				l, err := lock(ctx)
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				name := res
				if res == "set" {
					name = "set/" + l.Name()
				}
				holder := id + "/" + l.Token()[:8]
				ask("enter %s %d %s", name, l.Fence(), holder)
				time.Sleep(faultHold)
				lost := "0"
				select {
				case <-l.Lost():
					lost = "1"
				default:
				}
				ask("exit %s %d %s %s", name, l.Fence(), holder, lost)
				uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = l.Unlock(uctx)
				ucancel()
			}
		}()
	}
	work("mutex", c.Mutex("mutex", ttl).Lock)
	work("fair", c.FairMutex("fair", ttl).Lock)
	work("rw", c.RWMutex("rw", ttl).Lock)
	for range faultSetMembers {
		work("set", c.MutexSet("set", ttl).Acquire)
	}
	wg.Wait()
	return 1
}

// stepHook runs act for every script command carrying tok (set once the
// lease exists); act gets the command's ordinal among them and whether it
// is a release (an argument names the publish command).
type stepHook struct {
	mu  sync.Mutex
	tok string
	n   int
	act func(i int, release bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error
}

// stepped returns a client of srv, made with opts, whose commands go
// through a new stepHook, and the hook.
func stepped(t *testing.T, srv *redistest.Server, opts ...dlock.Option) (*dlock.Client, *stepHook) {
	t.Helper()
	h := &stepHook{}
	rdb := srv.Client(t)
	rdb.AddHook(h)
	c := dlock.New(rdb, opts...)
	t.Cleanup(func() { c.Close() })
	return c, h
}

func (h *stepHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *stepHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *stepHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		tok, act := h.tok, h.act
		has := tok != "" && slices.ContainsFunc(cmd.Args(), func(a any) bool { s, _ := a.(string); return s == tok })
		i := 0
		if has {
			i = h.n
			h.n++
		}
		h.mu.Unlock()
		if !has || act == nil {
			return next(ctx, cmd)
		}
		release := slices.ContainsFunc(cmd.Args(), func(a any) bool { s, _ := a.(string); return strings.Contains(strings.ToLower(s), "publish") })
		return act(i, release, ctx, cmd, next)
	}
}

func (h *stepHook) arm(tok string, act func(i int, release bool, ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error) {
	h.mu.Lock()
	h.tok, h.n, h.act = tok, 0, act
	h.mu.Unlock()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errLostReply is what a connection reset after a request was sent looks
// like: the request may have run.
var errLostReply = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}

// errRefused is a refused dial, a real one (nothing listens on port 1):
// a request that met it never reached Redis.
var errRefused = func() error {
	_, err := net.Dial("tcp", "127.0.0.1:1")
	return err
}()
