//go:build chaos

package dlock_test

// TestChaos is a randomized property test: clients with short and default
// TTLs run many goroutines doing random operations on a few names of every
// kind while a fault goroutine pauses Redis, kills its connections and
// delays or drops replies through a proxy. A registry outside Redis checks,
// whenever a holding starts, that no two leases both "believed held"
// (Lost() open, Unlock not called yet) break exclusion; that fences rise;
// that Unlock == nil leaves Lost() open for good; that every lease ends
// unlocked or lost; that every lock is free again at the end; and that no
// goroutine leaks.
//
// Run: [DLOCK_CHAOS=60s] [DLOCK_CHAOS_SEED=n] go test -tags chaos -race -run TestChaos -v .
// (a tool for hunting bugs, not part of the suite: it runs a minute by
// default, and what it finds is written down as a test of its own).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// holding is one lease (or one Do's function run) in the registry.
type holding struct {
	id         int64
	key        string // registry key: the name, or set/member
	kind       string // "x" exclusive, "r" reader, "w" writer, "s" semaphore
	permits    int64
	client     int
	ttl        time.Duration
	auto       bool
	fence      uint64 // 0 for Do
	lease      *dlock.Lease
	lostCh     <-chan struct{} // Lost(), or Do's ctx.Done()
	start      time.Time
	ending     atomic.Bool // Unlock called (or Do's fn returned)
	unlockAt   time.Time
	uerr       error
	unlocked   bool // Unlock returned
	op         string
	lostAt     atomic.Int64 // unix nanos when a watcher saw Lost() close
	acrossLoss atomic.Bool
	unlockCall atomic.Int64 // unix nanos when Unlock was called
	lossEnd    atomic.Int64 // unix nanos when the data loss it was held across ended
}

func (h *holding) believed() bool {
	if h.ending.Load() {
		return false
	}
	if ignoreLost {
		return true
	}
	select {
	case <-h.lostCh:
		return false
	default:
		return true
	}
}

type registry struct {
	t        *testing.T
	mu       sync.Mutex
	held     map[string]map[int64]*holding
	maxF     map[string]uint64
	fences   map[string]map[uint64]int64
	all      []*holding
	nextID   int64
	viol     []string
	sizes    map[string]int64
	lat      *latency
	started  time.Time
	stop     chan struct{}
	lossy    bool
	lossFrom int
}

// ignoreLost (DLOCK_CHAOS_IGNORELOST) checks the checker: holders then
// believe in leases past Lost(), and the pauses must show overlaps.
var ignoreLost = os.Getenv("DLOCK_CHAOS_IGNORELOST") != ""

func (r *registry) violation(format string, args ...any) {
	msg := fmt.Sprintf("[%v] ", time.Since(r.started).Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	r.viol = append(r.viol, msg)
	r.t.Log("VIOLATION: " + msg)
}

// callStart snapshots the highest fence registered for key before an
// acquisition is asked for.
func (r *registry) callStart(key string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxF[key]
}

func (h *holding) String() string {
	return fmt.Sprintf("#%d %s %s c%d ttl=%v auto=%v fence=%d permits=%d op=%s", h.id, h.kind, h.key, h.client, h.ttl, h.auto, h.fence, h.permits, h.op)
}

// add registers a holding that has just started and checks it against
// the others believed held on its key.
func (r *registry) add(h *holding, maxAtCall uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	h.id = r.nextID
	if h.lease != nil {
		lc := h.lease.Lost()
		go func() {
			select {
			case <-lc:
				h.lostAt.Store(time.Now().UnixNano())
			case <-r.stop:
			}
		}()
	}
	r.all = append(r.all, h)
	if !h.believed() {
		return
	}
	m := r.held[h.key]
	if m == nil {
		m = map[int64]*holding{}
		r.held[h.key] = m
	}
	// Drop those no longer believed held.
	for id, o := range m {
		if !o.believed() {
			delete(m, id)
		}
	}
	if h.fence != 0 {
		if h.fence <= maxAtCall {
			r.violation("fence of %v not above %d, registered before its call", h, maxAtCall)
		}
		fs := r.fences[h.key]
		if fs == nil {
			fs = map[uint64]int64{}
			r.fences[h.key] = fs
		}
		if other, ok := fs[h.fence]; ok {
			r.violation("fence %d issued twice on %s (#%d and %v)", h.fence, h.key, other, h)
		}
		fs[h.fence] = h.id
		r.maxF[h.key] = max(r.maxF[h.key], h.fence)
	}
	var clash []*holding
	switch h.kind {
	case "x", "w":
		for _, o := range m {
			clash = append(clash, o)
		}
	case "r":
		for _, o := range m {
			if o.kind == "w" {
				clash = append(clash, o)
			}
		}
	case "s":
		n := h.permits
		for _, o := range m {
			n += o.permits
		}
		if n > r.sizes[h.key] {
			for _, o := range m {
				clash = append(clash, o)
			}
		}
	}
	if len(clash) > 0 && !r.lossy {
		now := time.Now()
		desc := ""
		for _, o := range clash {
			desc += fmt.Sprintf("\n    held: %v, since %v ago", o, now.Sub(o.start).Round(time.Microsecond))
		}
		r.violation("exclusion: %v started (returned %v ago) while believed held:%s\n    scheduler max oversleep in last 2s: %v",
			h, now.Sub(h.start).Round(time.Microsecond), desc, r.lat.recent())
		// Watch when the others' Lost() close, to tell scheduling lateness.
		for _, o := range clash {
			go func() {
				select {
				case <-o.lostCh:
					r.t.Logf("  ... %v: Lost() closed %v after the clash", o, time.Since(now))
				case <-time.After(3 * time.Second):
					r.t.Logf("  ... %v: Lost() still open 3s after the clash (ending=%v)", o, o.ending.Load())
				}
			}()
		}
	}
	m[h.id] = h
}

// latency measures how late a 1ms sleep wakes: the scheduler's lateness.
type latency struct {
	mu   sync.Mutex
	hist []struct {
		at time.Time
		d  time.Duration
	}
}

func (l *latency) run(ctx context.Context) {
	for ctx.Err() == nil {
		s := time.Now()
		time.Sleep(time.Millisecond)
		d := time.Since(s) - time.Millisecond
		if d > 5*time.Millisecond {
			l.mu.Lock()
			l.hist = append(l.hist, struct {
				at time.Time
				d  time.Duration
			}{time.Now(), d})
			if len(l.hist) > 1000 {
				l.hist = l.hist[500:]
			}
			l.mu.Unlock()
		}
	}
}

func (l *latency) recent() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, e := range l.hist {
		if time.Since(e.at) < 2*time.Second {
			m = max(m, e.d)
		}
	}
	return m
}

type chaosClient struct {
	i    int
	c    *dlock.Client
	rdb  *redis.Client
	ttl  time.Duration // 0: default
	prox bool
	held bool // through the proxy that holds requests back
	opts string
}

func TestChaos(t *testing.T) {
	dur := time.Minute
	if v := os.Getenv("DLOCK_CHAOS"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("DLOCK_CHAOS=%q: %v", v, err)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DLOCK_CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (DLOCK_CHAOS_SEED=%d)", seed, seed)
	faultsOn := os.Getenv("DLOCK_CHAOS_NOFAULTS") == ""
	// Lossy: the faults also lose Redis' data (FLUSHALL, a restart without
	// data). Exclusion is then not promised; checked instead: fences,
	// and that every holder across a loss is told (Lost() or ErrLost).
	lossy := os.Getenv("DLOCK_CHAOS_LOSSY") != ""
	base := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	hold := redistest.StartProxy(t, srv.Addr()) // requests held back
	admin := srv.Client(t)
	ctx := context.Background()
	admin.Ping(ctx)
	leakOpt := goleak.IgnoreCurrent()

	lat := &latency{}
	reg := &registry{t: t, held: map[string]map[int64]*holding{}, maxF: map[string]uint64{},
		fences: map[string]map[uint64]int64{}, sizes: map[string]int64{}, lat: lat, started: time.Now(), stop: make(chan struct{})}
	latCtx, latStop := context.WithCancel(ctx)
	defer latStop()
	go lat.run(latCtx)

	reg.lossy = lossy
	workersPer := 6
	if v, err := strconv.Atoi(os.Getenv("DLOCK_CHAOS_WORKERS")); err == nil {
		workersPer = v
	}
	nClients := 2 + base.IntN(3)
	var clients []*chaosClient
	for i := range nClients {
		cc := &chaosClient{i: i}
		addr := srv.Addr()
		switch base.IntN(3) {
		case 0:
			addr, cc.prox = proxy.Addr(), true
		case 1:
			addr, cc.held = hold.Addr(), true
		}
		ro := &redis.Options{Addr: addr}
		switch base.IntN(4) {
		case 1:
			ro.ContextTimeoutEnabled = true
		case 2:
			ro.PoolSize = 4
		case 3:
			ro.MaxRetries = -1
			ro.ReadTimeout = 500 * time.Millisecond
		}
		cc.rdb = redis.NewClient(ro)
		cc.rdb.AddHook(netErrHook{})
		cc.opts = fmt.Sprintf("ctxTimeout=%v pool=%d retries=%d read=%v", ro.ContextTimeoutEnabled, ro.PoolSize, ro.MaxRetries, ro.ReadTimeout)
		cc.c = dlock.New(cc.rdb)
		if base.IntN(3) != 0 {
			cc.ttl = time.Duration(100+base.IntN(401)) * time.Millisecond
		}
		if v, err := time.ParseDuration(os.Getenv("DLOCK_CHAOS_TTLMAX")); err == nil {
			cc.ttl = 100*time.Millisecond + time.Duration(base.Int64N(int64(v-100*time.Millisecond)+1))
		}
		clients = append(clients, cc)
		t.Logf("client %d: proxy=%v holdproxy=%v ttl=%v %s", i, cc.prox, cc.held, cc.ttl, cc.opts)
	}
	semSize := int64(2 + base.IntN(2))
	reg.sizes["sem0"] = semSize
	members := []string{"a", "b"}
	if err := clients[0].c.MutexSet("set0").Add(ctx, members...); err != nil {
		t.Fatal(err)
	}
	t.Logf("semaphore size %d", semSize)

	// hand-off cancels: a holder that unlocks cancels waiters' ctxs on
	// the same key at that moment.
	var hoMu sync.Mutex
	handoff := map[string][]context.CancelFunc{}
	cancelWaiters := func(key string) {
		hoMu.Lock()
		fs := handoff[key]
		handoff[key] = nil
		hoMu.Unlock()
		for _, f := range fs {
			f()
		}
	}

	runCtx, stopRun := context.WithTimeout(ctx, dur)
	defer stopRun()

	var stats struct {
		acq, fail, faults, unlockErr, lost atomic.Int64
	}

	// The fault goroutine.
	var fwg sync.WaitGroup
	if faultsOn {
		frng := rand.New(rand.NewPCG(seed, 1))
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			for runCtx.Err() == nil {
				time.Sleep(time.Duration(100+frng.IntN(900)) * time.Millisecond)
				if runCtx.Err() != nil {
					return
				}
				stats.faults.Add(1)
				if !lossy || frng.IntN(2) == 0 {
					// A request of one connection reaches Redis late (a
					// lost TCP segment sent again), the others flow.
					if frng.IntN(3) == 0 {
						marker := "evalsha"
						if frng.IntN(2) == 0 {
							marker = "e6d723a3" // owner_renewals.lua's SHA: a batch of renewals
						}
						hold.DelayRequest(marker, time.Duration(100+frng.IntN(700))*time.Millisecond)
					}
				}
				nf := 9
				if lossy {
					nf = 11
				}
				switch frng.IntN(nf) {
				case 0, 1:
					d := time.Duration(50+frng.IntN(751)) * time.Millisecond
					srv.Pause(t)
					time.Sleep(d)
					srv.Resume(t)
				case 2:
					admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal")
				case 3:
					admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
				case 4:
					proxy.DelayReply("evalsha", time.Duration(20+frng.IntN(400))*time.Millisecond)
				case 5:
					proxy.DropReply("evalsha", frng.IntN(2) == 0, nil)
				case 6:
					proxy.DropPushed("message")
				case 7:
					// A member removed and added back at once.
					m := members[frng.IntN(len(members))]
					s := clients[0].c.MutexSet("set0")
					rctx, rc := context.WithTimeout(ctx, 2*time.Second)
					s.Remove(rctx, m)
					if frng.IntN(2) == 0 {
						time.Sleep(time.Duration(frng.IntN(100)) * time.Millisecond)
					}
					s.Add(rctx, m)
					rc()
				case 8:
					d := time.Duration(50+frng.IntN(751)) * time.Millisecond
					proxy.DelayReply("", d) // the next request of any kind through the proxy
				case 9, 10:
					reg.mu.Lock()
					var across []*holding
					for _, h := range reg.all {
						if h.lease != nil && h.believed() {
							across = append(across, h)
						}
					}
					reg.lossFrom = len(reg.all)
					reg.mu.Unlock()
					how := "FLUSHALL"
					if frng.IntN(2) == 0 {
						admin.FlushAll(ctx)
					} else {
						how = "restart"
						srv.Restart(t)
					}
					at := time.Now()
					t.Logf("data lost (%s) at %v; %d leases held across it", how, at.Sub(reg.started).Round(time.Millisecond), len(across))
					for _, h := range across {
						go func() {
							// Told by its next renewal, TTL/3 on, or at its
							// deadline; a second of slack for the fault run.
							limit := h.ttl/3 + h.ttl/10 + time.Second
							if !h.auto {
								limit = h.ttl + time.Second
							}
							select {
							case <-h.lease.Lost():
							case <-time.After(limit):
								if !h.ending.Load() {
									reg.mu.Lock()
									reg.violation("lease held across a data loss, Lost() still open %v later: %v", limit, h)
									reg.mu.Unlock()
								}
							}
						}()
						h.lossEnd.Store(at.UnixNano())
						h.acrossLoss.Store(true)
					}
				}
			}
		}()
	}

	type target struct {
		kind string // mutex fair rw sem set
		name string
	}
	targets := []target{{"mutex", "m0"}, {"mutex", "m1"}, {"fair", "f0"}, {"rw", "rw0"}, {"sem", "sem0"}, {"set", "set0"}, {"elect", "e0"}}

	var wg sync.WaitGroup
	nWorkers := 0
	for _, cc := range clients {
		for w := range workersPer {
			nWorkers++
			rng := rand.New(rand.NewPCG(seed, uint64(1000+cc.i*100+w)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for runCtx.Err() == nil {
					chaosStep(t, runCtx, rng, cc, targets[rng.IntN(len(targets))].kind, reg, members, semSize, &hoMu, handoff, cancelWaiters, &stats.acq, &stats.fail)
				}
			}()
		}
	}
	// The targets slice is indexed by kind name only; names are fixed per kind.
	_ = targets

	<-runCtx.Done()
	fwg.Wait()
	wg.Wait()
	t.Logf("workers %d, acquisitions %d, failed %d, faults %d", nWorkers, stats.acq.Load(), stats.fail.Load(), stats.faults.Load())

	// End checks on every lease.
	time.Sleep(500 * time.Millisecond)
	reg.mu.Lock()
	all := append([]*holding(nil), reg.all...)
	reg.mu.Unlock()
	var pending []*holding
	for _, h := range all {
		if h.lease == nil {
			continue
		}
		switch {
		case h.uerr == nil:
			if isClosed(h.lease.Lost()) {
				reg.violation("Unlock returned nil but Lost() closed later: %v", h)
			}
		case errors.Is(h.uerr, dlock.ErrLost):
			if !isClosed(h.lease.Lost()) {
				reg.violation("Unlock returned ErrLost but Lost() open: %v (%v)", h, h.uerr)
			}
			stats.lost.Add(1)
		default:
			stats.unlockErr.Add(1)
			pending = append(pending, h)
		}
	}
	// Leases whose Unlock failed: the background release or Lost() ends them.
	deadline := time.Now().Add(13 * time.Second)
	for _, h := range pending {
		for {
			uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := h.lease.Unlock(uctx)
			cancel()
			if err == nil {
				if isClosed(h.lease.Lost()) {
					reg.violation("retried Unlock nil but Lost() closed: %v", h)
				}
				break
			}
			if errors.Is(err, dlock.ErrLost) {
				// Lost() must close (it may be at the deadline).
				select {
				case <-h.lease.Lost():
				case <-time.After(time.Until(deadline)):
					reg.violation("retried Unlock ErrLost, Lost() never closed: %v", h)
				}
				break
			}
			if time.Now().After(deadline) {
				reg.violation("lease neither unlocked nor lost by the end: %v, last %v", h, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Every lock is free again.
	fresh := dlock.New(srv.Client(t))
	freeBy := time.Now().Add(13 * time.Second)
	check := func(what string, try func(context.Context) (*dlock.Lease, error)) {
		for {
			l, err := try(ctx)
			if err == nil {
				l.Unlock(ctx)
				return
			}
			if time.Now().After(freeBy) {
				reg.violation("%s not free at the end: %v", what, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check("m0", fresh.Mutex("m0").TryLock)
	check("m1", fresh.Mutex("m1").TryLock)
	check("f0", fresh.FairMutex("f0").TryLock)
	check("rw0", fresh.RWMutex("rw0").TryLock)
	check("sem0", func(ctx context.Context) (*dlock.Lease, error) {
		return fresh.Semaphore("sem0", semSize).TryAcquire(ctx, semSize)
	})
	check("e0", func(ctx context.Context) (*dlock.Lease, error) {
		l, err := fresh.Election("e0").TryCampaign(ctx, "v")
		if err != nil {
			return nil, err
		}
		return l.Lease, nil
	})
	fresh.MutexSet("set0").Add(ctx, members...)
	for _, m := range members {
		check("set0/"+m, func(ctx context.Context) (*dlock.Lease, error) {
			return fresh.MutexSet("set0").TryAcquireMember(ctx, m)
		})
	}
	fresh.Close()
	for _, cc := range clients {
		cc.c.Close()
		cc.rdb.Close()
	}
	latStop()
	close(reg.stop)
	t.Logf("leases: unlock errors retried %d, lost %d", stats.unlockErr.Load(), stats.lost.Load())
	var lerr error
	for range 20 {
		if lerr = goleak.Find(leakOpt, goleak.IgnoreAnyFunction("os/exec.(*Cmd).Start.func2"),
			goleak.IgnoreAnyFunction("github.com/go-dlock/dlock/internal/redistest.(*Server).spawnLocked.func1")); lerr == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if lerr != nil {
		reg.violation("goroutines leaked: %v", lerr)
	}
	if len(reg.viol) > 0 {
		t.Fatalf("seed %d: %d violations, first: %s", seed, len(reg.viol), reg.viol[0])
	}
}

// netErrTokens holds the tokens named by a single command that failed
// without a reply from Redis (it may have run): a release of theirs then
// may count as done (the README's "Lost release replies").
var netErrTokens sync.Map

type netErrHook struct{}

func (netErrHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (netErrHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (netErrHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		var rerr redis.Error
		if err != nil && !errors.As(err, &rerr) && !errors.Is(err, redis.Nil) {
			for _, a := range cmd.Args() {
				if s, ok := a.(string); ok && len(s) == 32 {
					netErrTokens.Store(s, true)
				}
			}
		}
		return err
	}
}

// chaosStep runs one random operation.
func chaosStep(t *testing.T, run context.Context, rng *rand.Rand, cc *chaosClient, kind string, reg *registry,
	members []string, semSize int64, hoMu *sync.Mutex, handoff map[string][]context.CancelFunc,
	cancelWaiters func(string), acq, fail *atomic.Int64) {
	var opts []dlock.LockOption
	ttl := 10 * time.Second
	if cc.ttl > 0 {
		ttl = cc.ttl
		opts = append(opts, dlock.WithTTL(ttl))
	}
	auto := true
	if cc.ttl > 0 && rng.IntN(6) == 0 {
		auto = false
		opts = append(opts, dlock.WithAutoRefresh(false))
	}
	// The acquisition's ctx.
	var actx context.Context
	var cancel context.CancelFunc
	mode := rng.IntN(10)
	switch {
	case mode < 4:
		actx, cancel = context.WithTimeout(run, 5*time.Second)
	case mode < 8:
		actx, cancel = context.WithTimeout(run, time.Duration(1+rng.IntN(300))*time.Millisecond)
	default:
		actx, cancel = context.WithTimeout(run, 5*time.Second)
	}
	defer cancel()
	onHandoff := mode >= 8
	try := rng.IntN(4) == 0
	useDo := !try && rng.IntN(5) == 0

	var key string
	var permits int64 = 1
	var acquire func(context.Context) (*dlock.Lease, error)
	var doIt func(context.Context, func(context.Context) error) error
	hkind := "x"
	switch kind {
	case "mutex":
		key = []string{"m0", "m1"}[rng.IntN(2)]
		m := cc.c.Mutex(key, opts...)
		acquire, doIt = m.Lock, m.Do
		if try {
			acquire = m.TryLock
		}
	case "fair":
		key = "f0"
		m := cc.c.FairMutex(key, opts...)
		acquire, doIt = m.Lock, m.Do
		if try {
			acquire = m.TryLock
		}
	case "rw":
		key = "rw0"
		if rng.IntN(3) == 0 {
			opts = append(opts, dlock.WithRWMode(dlock.PreferReaders))
		}
		rw := cc.c.RWMutex(key, opts...)
		if rng.IntN(2) == 0 {
			hkind = "r"
			acquire, doIt = rw.RLock, rw.RLocker().Do
			if try {
				acquire = rw.TryRLock
			}
		} else {
			hkind = "w"
			acquire, doIt = rw.Lock, rw.Do
			if try {
				acquire = rw.TryLock
			}
		}
	case "sem":
		key = "sem0"
		hkind = "s"
		permits = 1 + rng.Int64N(semSize)
		s := cc.c.Semaphore(key, semSize, opts...)
		acquire = func(ctx context.Context) (*dlock.Lease, error) { return s.Acquire(ctx, permits) }
		doIt = func(ctx context.Context, fn func(context.Context) error) error { return s.Do(ctx, permits, fn) }
		if try {
			acquire = func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquire(ctx, permits) }
		}
	case "elect":
		key = "e0"
		e := cc.c.Election(key, opts...)
		acquire = func(ctx context.Context) (*dlock.Lease, error) {
			l, err := e.Campaign(ctx, "v")
			if err != nil {
				return nil, err
			}
			return l.Lease, nil
		}
		if try {
			acquire = func(ctx context.Context) (*dlock.Lease, error) {
				l, err := e.TryCampaign(ctx, "v")
				if err != nil {
					return nil, err
				}
				return l.Lease, nil
			}
		}
		doIt = func(ctx context.Context, fn func(context.Context) error) error { return e.Do(ctx, "v", fn) }
	case "set":
		key = "set0"
		s := cc.c.MutexSet(key, opts...)
		if rng.IntN(2) == 0 {
			acquire = s.Acquire
			if try {
				acquire = s.TryAcquire
			}
		} else {
			mb := members[rng.IntN(len(members))]
			acquire = func(ctx context.Context) (*dlock.Lease, error) { return s.AcquireMember(ctx, mb) }
			if try {
				acquire = func(ctx context.Context) (*dlock.Lease, error) { return s.TryAcquireMember(ctx, mb) }
			}
		}
		useDo = false
	}
	if onHandoff && kind != "set" {
		hoMu.Lock()
		handoff[key] = append(handoff[key], cancel)
		hoMu.Unlock()
	}
	hold := time.Duration(rng.IntN(60)) * time.Millisecond
	if rng.IntN(10) == 0 {
		hold = time.Duration(rng.IntN(1200)) * time.Millisecond
	}
	opName := fmt.Sprintf("%s try=%v do=%v", kind, try, useDo)

	if useDo {
		_ = doIt(actx, func(fctx context.Context) error {
			acq.Add(1)
			h := &holding{key: key, kind: hkind, permits: permits, client: cc.i, ttl: ttl, auto: auto, lostCh: fctx.Done(), start: time.Now(), op: opName}
			reg.add(h, 0)
			select {
			case <-time.After(hold):
			case <-fctx.Done():
			}
			h.ending.Store(true)
			cancelWaiters(key)
			return nil
		})
		return
	}

	maxAt := uint64(0)
	if kind != "set" {
		maxAt = reg.callStart(key)
	}
	setMax := map[string]uint64{}
	if kind == "set" {
		for _, m := range members {
			setMax[m] = reg.callStart("set0/" + m)
		}
	}
	l, err := acquire(actx)
	if err != nil {
		fail.Add(1)
		if l != nil {
			reg.violation("%s returned a lease and an error %v", opName, err)
		}
		return
	}
	start := time.Now()
	acq.Add(1)
	if kind == "set" {
		key = "set0/" + l.Name()
		maxAt = setMax[l.Name()]
	}
	h := &holding{key: key, kind: hkind, permits: permits, client: cc.i, ttl: ttl, auto: auto, fence: l.Fence(), lease: l, lostCh: l.Lost(), start: start, op: opName}
	reg.add(h, maxAt)

	// Hold, refreshing now and then.
	end := time.Now().Add(hold)
	for time.Now().Before(end) {
		step := time.Duration(rng.IntN(40)) * time.Millisecond
		select {
		case <-time.After(step):
		case <-l.Lost():
			if ignoreLost {
				time.Sleep(step)
			}
		}
		if isClosed(l.Lost()) && !ignoreLost {
			break
		}
		if rng.IntN(4) == 0 {
			nt := time.Duration(50+rng.IntN(1000)) * time.Millisecond
			if rng.IntN(3) == 0 {
				nt = time.Duration(1000+rng.IntN(2000)) * time.Millisecond
			}
			if cc.ttl == 0 && rng.IntN(2) == 0 {
				nt = 10 * time.Second
			}
			rctx, rc := context.WithTimeout(run, time.Duration(5+rng.IntN(500))*time.Millisecond)
			err := l.Refresh(rctx, nt)
			rc()
			if errors.Is(err, dlock.ErrLost) && !isClosed(l.Lost()) {
				reg.violation("Refresh ErrLost but Lost() open: %v", h)
			}
		}
	}
	// Unlock, with a ctx that may end.
	var uctx context.Context
	var uc context.CancelFunc
	if rng.IntN(3) == 0 {
		uctx, uc = context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(200))*time.Millisecond)
	} else {
		uctx, uc = context.WithTimeout(context.Background(), 5*time.Second)
	}
	defer uc()
	h.unlockCall.Store(time.Now().UnixNano())
	h.ending.Store(true)
	h.unlockAt = time.Now()
	if rng.IntN(2) == 0 {
		cancelWaiters(key)
	} else {
		defer cancelWaiters(key)
	}
	var rwg sync.WaitGroup
	if rng.IntN(5) == 0 {
		// A Refresh racing the Unlock, from another goroutine.
		nt := time.Duration(50+rng.IntN(1000)) * time.Millisecond
		rd := time.Duration(1+rng.IntN(300)) * time.Millisecond
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rctx, rc := context.WithTimeout(context.Background(), rd)
			defer rc()
			l.Refresh(rctx, nt)
		}()
	}
	err = l.Unlock(uctx)
	rwg.Wait()
	h.uerr, h.unlocked = err, true
	if err == nil && h.acrossLoss.Load() && h.unlockCall.Load() > h.lossEnd.Load() {
		_, ne := netErrTokens.Load(l.Token())
		reg.t.Logf("NOTE: Unlock (called %v after the loss ended) nil for a lease held across a data loss: %v; a command of its token failed unanswered: %v",
			time.Duration(h.unlockCall.Load()-h.lossEnd.Load()), h, ne)
	}
	if err == nil && isClosed(l.Lost()) {
		reg.violation("Unlock returned nil with Lost() closed: %v", h)
	}
	if errors.Is(err, dlock.ErrLost) && !isClosed(l.Lost()) {
		reg.violation("Unlock ErrLost with Lost() open: %v (%v)", h, err)
	}
}
