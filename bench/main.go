// Command bench measures dlock against go-redsync/redsync and
// bsm/redislock, and against the protocol floor (SET NX PX and a
// compare-and-delete script), on one redis-server that it starts itself.
// It prints markdown tables and writes every figure as JSON.
//
//	go run . -out results.json         # full run, a few minutes
//	go run . -quick -out quick.json    # short run
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-dlock/dlock"
)

// report is everything one run measured, as written to -out.
type report struct {
	Env         environment       `json:"environment"`
	Settings    map[string]string `json:"settings"`
	Uncontended []uncontendedRow  `json:"uncontended"`
	Contention  []contentionRow   `json:"contention"`
	OwnKeys     []ownKeysRow      `json:"own_keys"`
	Waiters     []waitersRow      `json:"blocked_waiters"`
	RWMix       []rwMixRow        `json:"rw_mix"`
	Targets     []target          `json:"targets"`
}

func main() {
	if spec := os.Getenv(waitersEnv); spec != "" {
		if err := runWaitersChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "bench waiters child:", err)
			os.Exit(1)
		}
		return
	}
	if spec := os.Getenv(childEnv); spec != "" {
		if err := runChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	out := flag.String("out", "results.json", "where to write the JSON report (empty: nowhere)")
	md := flag.String("md", "", "also write the markdown report to this file")
	quick := flag.Bool("quick", false, "short run: 1s per contention run, 2,000 blocked waiters")
	dur := flag.Duration("duration", 0, "length of each contention run (default 5s, 1s with -quick)")
	waiters := flag.Int("waiters", 0, "blocked waiters in scenario 6 (default 10000, 2000 with -quick)")
	bin := flag.String("redis-server", "redis-server", "the redis-server binary to start")
	only := flag.String("only", "1,2,3,4,5,6,7", "the scenarios to run, by number")
	flag.Parse()
	if *dur == 0 {
		*dur = 5 * time.Second
		if *quick {
			*dur = time.Second
		}
	}
	if *waiters == 0 {
		*waiters = 10_000
		if *quick {
			*waiters = 2_000
		}
	}
	want := map[int]bool{}
	for _, f := range strings.Split(*only, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 7 {
			fmt.Fprintf(os.Stderr, "bench: -only %q: want scenario numbers 1 to 7\n", *only)
			os.Exit(2)
		}
		want[n] = true
	}
	r, err := run(*bin, *dur, *quick, *waiters, want)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	w := io.Writer(os.Stdout)
	if *md != "" {
		f, err := os.Create(*md)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	printReport(w, r)
	if *out != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
}

func run(bin string, dur time.Duration, quick bool, nWaiters int, want map[int]bool) (*report, error) {
	srv, err := startServer(bin)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	admin := newClient(srv.addr, nil)
	defer admin.Close()
	b := &bench{addr: srv.addr, admin: admin, dur: dur, quick: quick, log: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+f+"\n", a...)
	}}
	r := &report{Env: describe(context.Background(), admin, dur, quick), Settings: map[string]string{}}
	ps := peers()
	for _, p := range ps {
		r.Settings[p.name] = p.settings
	}
	r.Settings["go-redis"] = fmt.Sprintf("one *redis.Client per peer and process, PoolSize %d, other options default", poolSize)

	if want[1] {
		b.log("1 uncontended TryLock+Unlock (interleaved rounds)")
		diag, read, sem, ping := dlockMutexNoExpiry(), dlockRWRead(), dlockSem(), pingPeer()
		for _, p := range []peer{diag, read, sem, ping} {
			r.Settings[p.name] = p.settings
		}
		subjects := slices.Insert(slices.Clone(ps), 1, diag)
		subjects = slices.Insert(subjects, 4, read)
		subjects = append(slices.Insert(subjects, 6, sem), ping)
		if r.Uncontended, err = b.uncontended(subjects); err != nil {
			return nil, err
		}
	}
	var blocking []peer
	for _, p := range ps {
		if p.blocking {
			blocking = append(blocking, p)
		}
	}
	// contended runs one contention configuration for every blocking peer.
	contended := func(n int, scenario, what string, procs, goroutines int, lp loop) error {
		if !want[n] {
			return nil
		}
		for _, p := range blocking {
			b.log("%d %s: %s", n, what, p.name)
			row, err := b.contention(scenario, p, procs, goroutines, lp)
			if err != nil {
				return err
			}
			r.Contention = append(r.Contention, row)
		}
		return nil
	}
	hold := loop{hold: time.Millisecond}
	for _, err := range []error{
		contended(2, "contention", "contention, 8 goroutines", 1, 8, hold),
		contended(2, "contention", "contention, 64 goroutines", 1, 64, hold),
		contended(3, "contention", "contention, 4 processes × 8 goroutines", 4, 8, hold),
		contended(4, "wake-up", "wake-up", 1, 8, loop{hold: time.Millisecond, away: 5 * time.Millisecond}),
	} {
		if err != nil {
			return nil, err
		}
	}
	for _, p := range ps {
		if !want[5] {
			break
		}
		b.log("5 256 goroutines on keys of their own: %s", p.name)
		row, err := b.ownKeys(p, 256)
		if err != nil {
			return nil, err
		}
		r.OwnKeys = append(r.OwnKeys, row)
	}
	for _, mode := range []dlock.RWMode{dlock.PreferWriters, dlock.PreferReaders} {
		if !want[7] {
			break
		}
		b.log("7 RWMutex read mix, %s", mode)
		row, err := b.rwMix(mode, 6, 2)
		if err != nil {
			return nil, err
		}
		r.RWMix = append(r.RWMix, row)
	}
	settle, window := 3*time.Second, 2*time.Second
	if quick {
		settle, window = 2*time.Second, time.Second
	}
	// Each library in a process of its own (see waitersChild), so that
	// none reads what another left in the heap.
	for _, name := range []string{"dlock Mutex", "dlock FairMutex", "redsync", "redislock"} {
		if !want[6] {
			break
		}
		p, _ := peerByName(name)
		b.log("6 %d blocked waiters: %s", nWaiters, p.name)
		row, err := b.waitersChild(p, nWaiters, settle, window)
		if err != nil {
			return nil, err
		}
		r.Waiters = append(r.Waiters, row)
	}
	r.Env.LoadAfter = loadavg()
	r.Targets = targets(r)
	return r, nil
}
