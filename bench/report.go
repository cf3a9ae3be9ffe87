package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// environment is the machine and the run, for reading the figures.
type environment struct {
	Date       string  `json:"date"`
	CPUs       int     `json:"nproc"`
	CPUModel   string  `json:"cpu_model"`
	LoadBefore string  `json:"loadavg_before"`
	LoadAfter  string  `json:"loadavg_after"`
	Redis      string  `json:"redis_version"`
	Go         string  `json:"go_version"`
	Seconds    float64 `json:"seconds_per_contention_run"`
	Quick      bool    `json:"quick"`
	PoolSize   int     `json:"go_redis_pool_size"`
	// PING round trips, 5,000 in a row at the start: p10, p50, p90 in µs.
	Ping [3]float64 `json:"ping_p10_p50_p90_us"`
}

func describe(ctx context.Context, admin *redis.Client, dur time.Duration, quick bool) environment {
	e := environment{
		Date: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU(), LoadBefore: loadavg(),
		Redis: serverVersion(ctx, admin), Go: runtime.Version(), Seconds: dur.Seconds(), Quick: quick,
		PoolSize: poolSize,
	}
	if d, err := pingRTT(ctx, admin, 5000); err == nil {
		e.Ping = [3]float64{us(percentile(d, 10)), us(percentile(d, 50)), us(percentile(d, 90))}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return e
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// target is one goal of issue 8 and how this run did against it.
type target struct {
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func isDlock(name string) bool { return strings.HasPrefix(name, "dlock") }

func targets(r *report) []target {
	var ts []target
	add := func(met bool, goal, format string, args ...any) {
		ts = append(ts, target{goal, fmt.Sprintf(format, args...), met})
	}
	// Uncontended: dlock Mutex TryLock+Unlock p50 within 10% of the floor.
	var mutex, floor uncontendedRow
	for _, u := range r.Uncontended {
		switch {
		case u.Peer == "dlock Mutex" && u.Call == "TryLock":
			mutex = u
		case u.Peer == "floor":
			floor = u
		}
	}
	if floor.P50 > 0 {
		ratio := mutex.P50 / floor.P50
		add(ratio <= 1.10, "uncontended Mutex TryLock+Unlock p50 ≤ 1.10 × floor",
			"%.1f µs vs floor %.1f µs: %.3f× (%+.1f%%)", mutex.P50, floor.P50, ratio, (ratio-1)*100)
	}
	// Uncontended Redis time against redislock's: 1.5× for the Mutex, 2×
	// for the other primitives (issue 13).
	byPeer := map[string]uncontendedRow{}
	for _, u := range r.Uncontended {
		if u.Call == "TryLock" {
			byPeer[u.Peer] = u
		}
	}
	if rl := byPeer["redislock"]; rl.RedisUS > 0 {
		for _, name := range []string{"dlock Mutex", "dlock FairMutex", "dlock RWMutex (write)", "dlock RWMutex (read)", "dlock MutexSet"} {
			limit := 2.0
			if name == "dlock Mutex" {
				limit = 1.5
			}
			u := byPeer[name]
			ratio := u.RedisUS / rl.RedisUS
			add(ratio <= limit, fmt.Sprintf("uncontended Redis µs/pair ≤ %.1f × redislock's: %s", limit, name),
				"%.1f µs vs %.1f µs: %.2f×", u.RedisUS, rl.RedisUS, ratio)
		}
	}
	// Contention rows, grouped by configuration.
	type config struct {
		scenario string
		procs, n int
	}
	groups := map[config]map[string]contentionRow{}
	var order []config
	for _, c := range r.Contention {
		k := config{c.Scenario, c.Processes, c.Goroutines}
		if groups[k] == nil {
			groups[k] = map[string]contentionRow{}
			order = append(order, k)
		}
		groups[k][c.Peer] = c
	}
	for _, k := range order {
		g := groups[k]
		where := fmt.Sprintf("%d×%d", k.procs, k.n)
		if k.scenario == "wake-up" {
			for _, name := range []string{"dlock Mutex", "dlock FairMutex", "dlock RWMutex (write)", "dlock MutexSet"} {
				c := g[name]
				if c.PingP50 > 0 {
					ratio := c.GapP50 / c.PingP50
					add(ratio <= 3, "wake-up p50 ≤ 3 × PING p50: "+name,
						"%.0f µs vs PING %.0f µs (5,000 in a row before the run): %.1f× (%.1f× the PING p50 of %.0f µs during the run)",
						c.GapP50, c.PingP50, ratio, c.GapP50/c.PingLoaded, c.PingLoaded)
				}
			}
			continue
		}
		best, bestName := 0.0, ""
		for name, c := range g {
			if !isDlock(name) && c.PerSec > best {
				best, bestName = c.PerSec, name
			}
		}
		m := g["dlock Mutex"]
		add(m.PerSec >= best, "Mutex acquisitions/s ≥ best peer's, "+where,
			"%.0f/s vs %s %.0f/s (%+.0f%%)", m.PerSec, bestName, best, (m.PerSec/best-1)*100)
		f := g["dlock FairMutex"]
		add(f.Jain >= 0.99, "FairMutex Jain ≥ 0.99, "+where, "%.4f", f.Jain)
		cycle := 1000 / f.PerSec // ms per hold-and-hand-off
		bound := float64(k.procs*k.n-1+2) * cycle
		add(f.LongestWait <= bound, "FairMutex longest wait ≤ (waiters+2) × cycle, "+where,
			"%.1f ms vs bound %.1f ms (cycle %.2f ms = 1 s / acq/s); median wait %.1f cycles, p99 %.1f; at most %d others served during one wait (%d other waiters)",
			f.LongestWait, bound, cycle, f.WaitP50/cycle, f.WaitP99/cycle, f.MostPassed, k.procs*k.n-1)
		var worst []string
		met := true
		for name, c := range g {
			if !isDlock(name) {
				met = met && f.LongestWait*5 <= c.LongestWait
				worst = append(worst, fmt.Sprintf("%s %.0f ms (%.1f×)", name, c.LongestWait, c.LongestWait/f.LongestWait))
			}
		}
		add(met, "FairMutex longest wait ≥ 5× shorter than every peer's, "+where,
			"%.1f ms vs %s", f.LongestWait, strings.Join(worst, ", "))
	}
	// Round trips per dlock primitive, and overlaps, over every run.
	type worst struct {
		rt    float64
		where string
	}
	rts := map[string]worst{}
	var prims []string
	note := func(prim string, rt float64, where string) {
		w, seen := rts[prim]
		if !seen {
			prims = append(prims, prim)
		}
		if !seen || rt > w.rt {
			rts[prim] = worst{rt, where}
		}
	}
	violations, runs := int64(0), 0
	for _, c := range r.Contention {
		runs++
		violations += c.Violations
		if isDlock(c.Peer) {
			note(c.Peer, c.RTPerAcq, fmt.Sprintf("%s %d×%d", c.Scenario, c.Processes, c.Goroutines))
		}
	}
	for _, x := range r.RWMix {
		runs++
		violations += x.Violations
		note("dlock RWMutex (read mix)", x.RTPerAcq, x.Mode)
	}
	for _, prim := range prims {
		w := rts[prim]
		add(w.rt <= 4, "round trips per acquisition ≤ 4: "+prim, "worst %.2f (%s)", w.rt, w.where)
	}
	for _, w := range r.Waiters {
		if isDlock(w.Peer) {
			add(w.SubConns <= 2, fmt.Sprintf("%d blocked waiters, one process: ≤ 2 connections for waiting: %s", w.Waiters, w.Peer),
				"%d subscription connection(s); besides, the waiting client's command pool had %d connections, %d active while blocked (heartbeat tries, %.0f commands/s)",
				w.SubConns, w.Conns-w.SubConns, w.Active-w.SubConns, w.CmdsSec)
		}
	}
	add(violations == 0, "zero overlap violations", "%d in %d runs", violations, runs)
	return ts
}

func printReport(w io.Writer, r *report) {
	e := r.Env
	fmt.Fprintf(w, "## dlock benchmark, %s\n\n", e.Date)
	fmt.Fprintf(w, "%d CPUs (%s), load average %s before, %s after; Redis %s; %s; %.0fs per contention run; go-redis PoolSize %d. "+
		"PING round trip at the start (5,000 in a row): p10 %.0f µs, p50 %.0f µs, p90 %.0f µs.\n\n",
		e.CPUs, e.CPUModel, e.LoadBefore, e.LoadAfter, e.Redis, e.Go, e.Seconds, e.PoolSize, e.Ping[0], e.Ping[1], e.Ping[2])

	fmt.Fprintln(w, "### 1. Uncontended lock + unlock (one goroutine)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Library | call | pairs/s | p50 µs | p99 µs | round trips/pair | Redis µs/pair |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	for _, u := range r.Uncontended {
		fmt.Fprintf(w, "| %s | %s+Unlock | %.0f | %.0f | %.0f | %.2f | %.1f |\n", u.Peer, u.Call, u.OpsSec, u.P50, u.P99, u.RTPerOp, u.RedisUS)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### 2–3. One lock, every holder holds it 1 ms and asks again at once")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Library | procs×goroutines | acq/s (ceiling) | hand-off gap p50 / p99 µs | round trips/acq | same holder again | wait p50 / p99 / longest ms | most served during one wait | Jain | overlaps | errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range r.Contention {
		if c.Scenario == "contention" {
			fmt.Fprintf(w, "| %s | %d×%d | %.0f (%.0f) | %.0f / %.0f | %.2f | %.0f%% | %.1f / %.0f / %.0f | %d | %.3f | %d | %d |\n",
				c.Peer, c.Processes, c.Goroutines, c.PerSec, c.Ceiling, c.GapP50, c.GapP99, c.RTPerAcq,
				c.SameHolder*100, c.WaitP50, c.WaitP99, c.LongestWait, c.MostPassed, c.Jain, c.Violations, c.Errors)
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### 4. Wake-up: 8 goroutines hold 1 ms, then step away 5 ms; every acquisition is a hand-off")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Library | Unlock → next Lock returns p50 / p99 µs | PING p50 µs before / during run | p50 / PING before | hand-offs | round trips/acq | acq/s | overlaps | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range r.Contention {
		if c.Scenario == "wake-up" {
			fmt.Fprintf(w, "| %s | %.0f / %.0f | %.0f / %.0f | %.1f× | %.0f%% | %.2f | %.0f | %d | %d |\n",
				c.Peer, c.GapP50, c.GapP99, c.PingP50, c.PingLoaded, c.GapP50/c.PingP50, c.Handoffs*100, c.RTPerAcq, c.PerSec, c.Violations, c.Errors)
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### 5. 256 goroutines, each on a key of its own (Lock + Unlock)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Library | pairs/s | round trips/pair | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, o := range r.OwnKeys {
		fmt.Fprintf(w, "| %s | %.0f | %.2f | %d |\n", o.Peer, o.OpsSec, o.RTPerOp, o.Errors)
	}
	fmt.Fprintln(w)

	if len(r.Waiters) > 0 {
		fmt.Fprintf(w, "### 6. %d goroutines, each blocked on its own held lock\n\n", r.Waiters[0].Waiters)
	}
	fmt.Fprintln(w, "| Library | still blocked | connections (subscriber / active) | commands/s while blocked | HeapInuse Δ MiB | per waiter KiB | live (HeapAlloc Δ) per waiter KiB | StackInuse Δ MiB | Sys Δ MiB | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.Waiters {
		fmt.Fprintf(w, "| %s | %d | %d (%d / %d) | %.0f | %.1f | %.2f | %.2f | %.1f | %.1f | %d |\n",
			x.Peer, x.Blocked, x.Conns, x.SubConns, x.Active, x.CmdsSec, x.HeapInuse, x.PerWaiter, x.LivePerWaiter, x.Stack, x.Sys, x.Errors)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### 7. dlock RWMutex read mix: 6 readers and 2 writers, each holds 1 ms and pauses 1 ms")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Mode | acq/s | reads/s | writes/s | round trips/acq | longest read wait ms | longest write wait ms | overlaps | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.RWMix {
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.2f | %.0f | %.0f | %d | %d |\n",
			x.Mode, x.PerSec, x.ReadsSec, x.WritesSec, x.RTPerAcq, x.LongestRead, x.LongestWrite, x.Violations, x.Errors)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Target | Measured | |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, t := range r.Targets {
		verdict := "met"
		if !t.Met {
			verdict = "**missed**"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.Goal, t.Measured, verdict)
	}
	fmt.Fprintln(w)
	var errLines []string
	for _, c := range r.Contention {
		if c.ErrorSample != "" {
			errLines = append(errLines, fmt.Sprintf("- %s, %s %d×%d: %d errors, e.g. %s", c.Peer, c.Scenario, c.Processes, c.Goroutines, c.Errors, c.ErrorSample))
		}
	}
	for _, x := range r.Waiters {
		if x.ErrSample != "" {
			errLines = append(errLines, fmt.Sprintf("- %s, blocked waiters: %d errors, e.g. %s", x.Peer, x.Errors, x.ErrSample))
		}
	}
	if len(errLines) > 0 {
		fmt.Fprintln(w, "Errors:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, strings.Join(errLines, "\n"))
		fmt.Fprintln(w)
	}
}
