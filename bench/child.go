package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// childEnv, when set, makes this program a child of a multi-process run:
// it holds the child's job as JSON.
const childEnv = "DLOCK_BENCH_CHILD"

// job is what a child process runs.
type job struct {
	Addr       string `json:"addr"`
	Peer       string `json:"peer"`
	Key        string `json:"key"`
	Goroutines int    `json:"goroutines"`
	Base       int    `json:"base"` // number of its first worker
	Hold       int64  `json:"hold_ns"`
	Away       int64  `json:"away_ns"`
	Start      int64  `json:"start_unix_ns"`
	End        int64  `json:"end_unix_ns"`
	Marker     string `json:"marker"` // the O_EXCL file of the critical section
}

// children runs one lock across procs copies of this program, n
// goroutines each, from a common start, and collects their outcomes.
func (b *bench) children(p peer, key string, procs, n int, lp loop) ([]outcome, time.Time, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, time.Time{}, err
	}
	dir, err := os.MkdirTemp("", "dlock-bench-marker-")
	if err != nil {
		return nil, time.Time{}, err
	}
	defer os.RemoveAll(dir)
	// Time to start, connect and warm up before the common start.
	start := time.Now().Add(2 * time.Second)
	end := start.Add(b.dur)
	outs := make([]outcome, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		j := job{Addr: b.addr, Peer: p.name, Key: key, Goroutines: n, Base: i * n,
			Hold: int64(lp.hold), Away: int64(lp.away), Start: start.UnixNano(), End: end.UnixNano(),
			Marker: filepath.Join(dir, "held")}
		spec, _ := json.Marshal(j)
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("child %d: %w", i, err)
				return
			}
			if err := json.Unmarshal(stdout.Bytes(), &outs[i]); err != nil {
				errs[i] = fmt.Errorf("child %d: reading its report: %w", i, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, end, err
		}
	}
	return outs, end, nil
}

// runChild is the child's side: run the job, report JSON on stdout.
func runChild(spec string) error {
	var j job
	p, err := readJob(spec, &j, &j.Peer)
	if err != nil {
		return err
	}
	cnt := &counter{}
	rdb := newClient(j.Addr, cnt)
	defer rdb.Close()
	mk, closer := p.open(rdb)
	defer closer()
	ls := make([]locker, j.Goroutines)
	for i := range ls {
		l, err := mk(j.Key)
		if err != nil {
			return err
		}
		ls[i] = l
	}
	time.Sleep(time.Until(time.Unix(0, j.Start)))
	lp := loop{hold: time.Duration(j.Hold), away: time.Duration(j.Away), base: j.Base}
	out := contend(ls, lp, one(&marker{path: j.Marker}), time.Unix(0, j.End), cnt)
	return json.NewEncoder(os.Stdout).Encode(out)
}

// waitersEnv, when set, makes this program the process of one library's
// blocked waiters (scenario 6): it holds a waitersJob as JSON.
const waitersEnv = "DLOCK_BENCH_WAITERS"

// waitersJob is scenario 6 for one library.
type waitersJob struct {
	Addr   string `json:"addr"`
	Peer   string `json:"peer"`
	N      int    `json:"waiters"`
	Settle int64  `json:"settle_ns"`
	Window int64  `json:"window_ns"`
	Keys   int64  `json:"keys"` // the numbers of its keys start after this
}

// waitersChild runs scenario 6 for p in a copy of this program, so that
// its heap holds nothing of another library's run: measured in one
// process one after the other, a library read up to a KiB per waiter
// more or less depending on its place in the order.
func (b *bench) waitersChild(p peer, n int, settle, window time.Duration) (waitersRow, error) {
	var row waitersRow
	self, err := os.Executable()
	if err != nil {
		return row, err
	}
	keys := b.keys.Add(int64(2*n)) - int64(2*n) // two passes' worth
	spec, _ := json.Marshal(waitersJob{Addr: b.addr, Peer: p.name, N: n, Settle: int64(settle), Window: int64(window), Keys: keys})
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), waitersEnv+"="+string(spec))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return row, fmt.Errorf("%s waiters: %w", p.name, err)
	}
	if err := json.Unmarshal(stdout.Bytes(), &row); err != nil {
		return row, fmt.Errorf("%s waiters: reading the report: %w", p.name, err)
	}
	return row, nil
}

// runWaitersChild is the waiters process: scenario 6 twice, the second
// pass reported as JSON on stdout. The first pass is not reported: the
// first run in a process shows more memory (Sys most of all), as the
// runtime grows to n goroutines once.
func runWaitersChild(spec string) error {
	var j waitersJob
	p, err := readJob(spec, &j, &j.Peer)
	if err != nil {
		return err
	}
	admin := newClient(j.Addr, nil)
	defer admin.Close()
	b := &bench{addr: j.Addr, admin: admin, log: func(string, ...any) {}}
	b.keys.Store(j.Keys)
	var row waitersRow
	for range 2 {
		if row, err = b.waiters(p, j.N, time.Duration(j.Settle), time.Duration(j.Window)); err != nil {
			return err
		}
	}
	return json.NewEncoder(os.Stdout).Encode(row)
}

// readJob reads a child's job from spec into j and returns the peer it
// names in *name.
func readJob(spec string, j any, name *string) (peer, error) {
	if err := json.Unmarshal([]byte(spec), j); err != nil {
		return peer{}, err
	}
	p, ok := peerByName(*name)
	if !ok {
		return peer{}, fmt.Errorf("unknown peer %q", *name)
	}
	return p, nil
}
