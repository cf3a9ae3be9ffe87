package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// bench is one run of the program: the server and how long to measure.
type bench struct {
	addr  string
	admin *redis.Client
	dur   time.Duration // one contention run
	quick bool
	keys  atomic.Int64 // makes every run's key its own
	log   func(format string, args ...any)
}

// key returns a key no earlier run used.
func (b *bench) key(what string) string {
	return fmt.Sprintf("bench:%s:%d", what, b.keys.Add(1))
}

// instance is a peer opened on a client of its own, whose commands cnt
// counts.
type instance struct {
	rdb   *redis.Client
	cnt   *counter
	mk    func(key string) (locker, error)
	close func()
}

func (b *bench) open(p peer) *instance {
	cnt := &counter{}
	rdb := newClient(b.addr, cnt)
	mk, closer := p.open(rdb)
	return &instance{rdb: rdb, cnt: cnt, mk: mk, close: func() { closer(); rdb.Close() }}
}

// lockers makes n lockers on key, and takes and releases the lock once
// so that scripts are loaded before the measurement.
func (in *instance) lockers(n int, key string) ([]locker, error) {
	ls := make([]locker, n)
	for i := range ls {
		l, err := in.mk(key)
		if err != nil {
			return nil, err
		}
		ls[i] = l
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := warmPool(ctx, in.rdb, n); err != nil {
		return nil, err
	}
	unlock, err := ls[0].Lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("warm-up lock: %w", err)
	}
	return ls, unlock(ctx)
}

// warmPool opens up to n pooled connections at once, so that no run
// pays for dialing them.
func warmPool(ctx context.Context, rdb *redis.Client, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, min(n, poolSize))
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rdb.Ping(ctx).Err()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// uncontendedRow is scenario 1: one goroutine, TryLock (or Lock) then
// Unlock, on a lock nobody else uses.
type uncontendedRow struct {
	Peer     string  `json:"peer"`
	Call     string  `json:"call"`
	Pairs    int     `json:"pairs"`
	OpsSec   float64 `json:"pairs_per_sec"`
	P50      float64 `json:"p50_us"`
	P99      float64 `json:"p99_us"`
	RTPerOp  float64 `json:"round_trips_per_pair"`
	RedisUS  float64 `json:"redis_us_per_pair"` // Redis' own time, INFO commandstats
	Errors   int     `json:"errors"`
	lat      []time.Duration
	busy     time.Duration
	commands int64
	redis    float64
}

// uncontended runs scenario 1 in interleaved rounds.
func (b *bench) uncontended(ps []peer) ([]uncontendedRow, error) {
	type subject struct {
		row  *uncontendedRow
		in   *instance
		l    locker
		lock bool
	}
	var subs []subject
	for _, p := range ps {
		calls := []string{"TryLock"}
		if p.name == "dlock Mutex" {
			calls = append(calls, "Lock")
		}
		for _, call := range calls {
			in := b.open(p)
			defer in.close()
			ls, err := in.lockers(1, b.key("uncontended"))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			subs = append(subs, subject{&uncontendedRow{Peer: p.name, Call: call}, in, ls[0], call == "Lock"})
		}
	}
	// Short rounds, so that the load of a shared machine, which drifts
	// over seconds, falls on every subject alike.
	rounds, perRound := 150, 20
	if b.quick {
		rounds = 50
	}
	ctx := context.Background()
	for range rounds {
		for _, s := range subs {
			before, usec0 := s.in.cnt.n.Load(), commandUsec(ctx, b.admin, s.in.cnt)
			t0 := time.Now()
			for range perRound {
				t := time.Now()
				take := s.l.TryLock
				if s.lock {
					take = s.l.Lock
				}
				unlock, err := take(ctx)
				if err == nil {
					err = unlock(ctx)
				}
				if err != nil {
					s.row.Errors++
					continue
				}
				s.row.lat = append(s.row.lat, time.Since(t))
			}
			s.row.busy += time.Since(t0)
			s.row.commands += s.in.cnt.n.Load() - before
			s.row.redis += commandUsec(ctx, b.admin, s.in.cnt) - usec0
		}
	}
	rows := make([]uncontendedRow, len(subs))
	for i, s := range subs {
		r := s.row
		r.Pairs = len(r.lat)
		r.OpsSec = float64(r.Pairs) / r.busy.Seconds()
		r.RTPerOp = float64(r.commands) / float64(rounds*perRound)
		r.RedisUS = r.redis / float64(rounds*perRound)
		r.P50, r.P99 = us(percentile(r.lat, 50)), us(percentile(r.lat, 99))
		rows[i] = *r
	}
	return rows, nil
}

// contentionRow is one run of scenarios 2, 3 and 4.
type contentionRow struct {
	Scenario   string  `json:"scenario"`
	Peer       string  `json:"peer"`
	Processes  int     `json:"processes"`
	Goroutines int     `json:"goroutines_per_process"`
	HoldMs     float64 `json:"hold_ms"`
	AwayMs     float64 `json:"away_ms"`
	Seconds    float64 `json:"seconds"`
	PingP50    float64 `json:"ping_p50_us,omitempty"`        // 5,000 in a row just before the run
	PingLoaded float64 `json:"ping_loaded_p50_us,omitempty"` // every 2ms during the run
	contention
}

// pingUntil sends a PING every 2ms on a client of its own until end and
// returns the round trips: the floor under the same load as the run.
func pingUntil(addr string, end time.Time) []time.Duration {
	rdb := newClient(addr, nil)
	defer rdb.Close()
	var d []time.Duration
	for time.Now().Before(end) {
		t := time.Now()
		if rdb.Ping(context.Background()).Err() == nil {
			d = append(d, time.Since(t))
		}
		time.Sleep(2 * time.Millisecond)
	}
	return d
}

func (in *instance) addr() string { return in.rdb.Options().Addr }

// contention runs one lock shared by procs processes × n goroutines.
func (b *bench) contention(scenario string, p peer, procs, n int, lp loop) (contentionRow, error) {
	row := contentionRow{Scenario: scenario, Peer: p.name, Processes: procs, Goroutines: n,
		HoldMs: ms(lp.hold), AwayMs: ms(lp.away), Seconds: b.dur.Seconds()}
	in := b.open(p)
	defer in.close()
	key := b.key("contention")
	ls, err := in.lockers(n, key)
	if err != nil {
		return row, fmt.Errorf("%s: %w", p.name, err)
	}
	if scenario == "wake-up" {
		// Long enough to see both of the speeds that round trips on a
		// shared VM switch between (see docs/benchmarks.md).
		d, err := pingRTT(context.Background(), in.rdb, 5000)
		if err != nil {
			return row, err
		}
		row.PingP50 = us(percentile(d, 50))
	}
	var outs []outcome
	var end time.Time
	if procs == 1 {
		end = time.Now().Add(b.dur)
		var pings chan []time.Duration
		if scenario == "wake-up" {
			pings = make(chan []time.Duration, 1)
			go func() { pings <- pingUntil(in.addr(), end) }()
		}
		outs = append(outs, contend(ls, lp, one(&holders{}), end, in.cnt))
		if pings != nil {
			row.PingLoaded = us(percentile(<-pings, 50))
		}
	} else {
		outs, end, err = b.children(p, key, procs, n, lp)
		if err != nil {
			return row, err
		}
	}
	var all outcome
	for _, o := range outs {
		all.Acqs = append(all.Acqs, o.Acqs...)
		all.Unfinished = append(all.Unfinished, o.Unfinished...)
		all.Violations += o.Violations
		all.Commands += o.Commands
		all.Errors += o.Errors
		if all.ErrSample == "" {
			all.ErrSample = o.ErrSample
		}
	}
	row.contention = summarize(all.Acqs, procs*n, all.Unfinished, end.UnixNano(), b.dur.Seconds(), all.Commands)
	row.Violations, row.Errors, row.ErrorSample = all.Violations, all.Errors, all.ErrSample
	return row, nil
}

// ownKeysRow is scenario 5: every goroutine locks a key of its own.
type ownKeysRow struct {
	Peer       string  `json:"peer"`
	Goroutines int     `json:"goroutines"`
	OpsSec     float64 `json:"pairs_per_sec"`
	RTPerOp    float64 `json:"round_trips_per_pair"`
	Errors     int     `json:"errors"`
}

func (b *bench) ownKeys(p peer, n int) (ownKeysRow, error) {
	row := ownKeysRow{Peer: p.name, Goroutines: n}
	in := b.open(p)
	defer in.close()
	ls := make([]locker, n)
	for i := range ls {
		l, err := in.lockers(1, b.key("own"))
		if err != nil {
			return row, fmt.Errorf("%s: %w", p.name, err)
		}
		ls[i] = l[0]
	}
	out := contend(ls, loop{}, one(nobody{}), time.Now().Add(b.dur), in.cnt)
	row.OpsSec = float64(len(out.Acqs)) / b.dur.Seconds()
	if len(out.Acqs) > 0 {
		row.RTPerOp = float64(out.Commands) / float64(len(out.Acqs))
	}
	row.Errors = out.Errors
	return row, nil
}

// waitersRow is scenario 6: n goroutines each blocked on its own held lock.
type waitersRow struct {
	Peer      string  `json:"peer"`
	Waiters   int     `json:"waiters"`
	Blocked   int     `json:"still_blocked"` // at the end of the window, as they should be
	Conns     int     `json:"waiting_client_connections"`
	SubConns  int     `json:"subscriber_connections"`
	Active    int     `json:"connections_active_in_window"`
	CmdsSec   float64 `json:"commands_per_sec_while_blocked"`
	HeapInuse float64 `json:"heap_inuse_delta_mib"`
	Stack     float64 `json:"stack_inuse_delta_mib"`
	Sys       float64 `json:"sys_delta_mib"`
	PerWaiter float64 `json:"heap_inuse_per_waiter_kib"`
	// LivePerWaiter is the HeapAlloc Δ per waiter: the live objects,
	// without the free room in the spans HeapInuse counts.
	LivePerWaiter float64 `json:"heap_alloc_per_waiter_kib"`
	Errors        int     `json:"errors"`
	ErrSample     string  `json:"error_sample,omitempty"`
}

const waitersName = "bench-waiters"

// How scenario 6 reads the heap (see waiters).
const (
	memSamples = 7
	memGap     = 150 * time.Millisecond
)

// median is the middle of xs (the upper one of an even count); it sorts
// xs.
func median(xs []int64) int64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// waiters holds n locks on one client, blocks n goroutines on them on
// another, and looks at what the waiting costs once they have settled.
func (b *bench) waiters(p peer, n int, settle, window time.Duration) (waitersRow, error) {
	row := waitersRow{Peer: p.name, Waiters: n}
	ctx := context.Background()
	holdIn := b.open(p)
	defer holdIn.close()
	wcnt := &counter{}
	wrdb := redis.NewClient(&redis.Options{Addr: b.addr, PoolSize: poolSize, ClientName: waitersName})
	wrdb.AddHook(wcnt)
	mk, closer := p.open(wrdb)
	defer func() { closer(); wrdb.Close() }()

	keys := make([]string, n)
	waiting := make([]locker, n)
	unlocks := make([]unlockFunc, n)
	for i := range keys {
		keys[i] = b.key("waiters")
		h, err := holdIn.mk(keys[i])
		if err != nil {
			return row, err
		}
		if unlocks[i], err = h.TryLock(ctx); err != nil {
			return row, fmt.Errorf("%s: holding %s: %w", p.name, keys[i], err)
		}
		if waiting[i], err = mk(keys[i]); err != nil {
			return row, err
		}
	}
	defer parallel(n, func(i int) { unlocks[i](ctx) })

	var before, during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	wctx, cancel := context.WithCancel(ctx)
	var (
		wg        sync.WaitGroup
		returned  atomic.Int64
		mu        sync.Mutex
		errSample string
	)
	for _, l := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := l.Lock(wctx)
			returned.Add(1)
			if err == nil {
				unlock(ctx)
				err = fmt.Errorf("acquired a held lock")
			}
			if wctx.Err() == nil {
				mu.Lock()
				row.Errors++
				errSample = err.Error()
				mu.Unlock()
			}
		}()
	}
	time.Sleep(settle)
	c0, t0 := wcnt.n.Load(), time.Now()
	time.Sleep(window)
	row.CmdsSec = float64(wcnt.n.Load()-c0) / time.Since(t0).Seconds()
	row.Blocked = n - int(returned.Load())
	// The heap is read memSamples times, memGap apart, and the median
	// kept: a library's periodic work (a heartbeat batch, a poll) is
	// on its way in some readings and not in others.
	var inuse, alloc []int64
	for i := range memSamples {
		if i > 0 {
			time.Sleep(memGap)
		}
		runtime.GC()
		runtime.ReadMemStats(&during)
		inuse = append(inuse, int64(during.HeapInuse)-int64(before.HeapInuse))
		alloc = append(alloc, int64(during.HeapAlloc)-int64(before.HeapAlloc))
	}
	row.HeapInuse = mib(median(inuse))
	row.Stack = mib(int64(during.StackInuse) - int64(before.StackInuse))
	row.Sys = mib(int64(during.Sys) - int64(before.Sys))
	row.PerWaiter = float64(median(inuse)) / 1024 / float64(n)
	row.LivePerWaiter = float64(median(alloc)) / 1024 / float64(n)
	var err error
	row.Conns, row.SubConns, row.Active, err = namedClients(ctx, b.admin, waitersName, window)
	cancel()
	wg.Wait()
	mu.Lock()
	row.ErrSample = errSample
	mu.Unlock()
	return row, err
}

// namedClients counts the connections called name: all, those in
// subscriber mode, and those that sent a command within the last window.
func namedClients(ctx context.Context, admin *redis.Client, name string, window time.Duration) (total, sub, active int, err error) {
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(list, "\n") {
		f := fields(line)
		if f["name"] != name {
			continue
		}
		total++
		if f["sub"] != "0" || f["psub"] != "0" || (f["ssub"] != "" && f["ssub"] != "0") {
			sub++
		}
		var idle int
		fmt.Sscan(f["idle"], &idle)
		// idle is in whole seconds.
		if time.Duration(idle)*time.Second <= window {
			active++
		}
	}
	return total, sub, active, nil
}

func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

// parallel runs f(0..n-1) on a few goroutines.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		}()
	}
	wg.Wait()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mib(n int64) float64        { return float64(n) / (1 << 20) }
