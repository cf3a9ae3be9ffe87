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
	if err := json.Unmarshal([]byte(spec), &j); err != nil {
		return err
	}
	p, ok := peerByName(j.Peer)
	if !ok {
		return fmt.Errorf("unknown peer %q", j.Peer)
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
