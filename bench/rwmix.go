package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-dlock/dlock"
)

// rwCheck checks reader/writer exclusion inside the critical section:
// any number of readers, or one writer alone.
type rwCheck struct{ readers, writers atomic.Int64 }

type readSide struct{ c *rwCheck }
type writeSide struct{ c *rwCheck }

func (r readSide) enter() bool { r.c.readers.Add(1); return r.c.writers.Load() == 0 }
func (r readSide) leave()      { r.c.readers.Add(-1) }
func (w writeSide) enter() bool {
	return w.c.writers.Add(1) == 1 && w.c.readers.Load() == 0
}
func (w writeSide) leave() { w.c.writers.Add(-1) }

// rwMixRow is the read-mix run of a dlock RWMutex (scenario 7).
type rwMixRow struct {
	Mode         string  `json:"mode"`
	Readers      int     `json:"readers"`
	Writers      int     `json:"writers"`
	PerSec       float64 `json:"acq_per_sec"`
	ReadsSec     float64 `json:"reads_per_sec"`
	WritesSec    float64 `json:"writes_per_sec"`
	RTPerAcq     float64 `json:"round_trips_per_acq"`
	LongestRead  float64 `json:"longest_read_wait_ms"`
	LongestWrite float64 `json:"longest_write_wait_ms"`
	Violations   int64   `json:"overlap_violations"`
	Errors       int     `json:"errors"`
}

// rwMix runs readers and writers on one RWMutex of one client: each holds
// 1 ms and pauses 1 ms before asking again.
func (b *bench) rwMix(mode dlock.RWMode, readers, writers int) (rwMixRow, error) {
	row := rwMixRow{Mode: mode.String(), Readers: readers, Writers: writers}
	cnt := &counter{}
	rdb := newClient(b.addr, cnt)
	defer rdb.Close()
	c := dlock.New(rdb)
	defer c.Close()
	rw := c.RWMutex(b.key("rwmix"), dlock.WithRWMode(mode))
	ls := make([]locker, readers+writers)
	for i := range ls {
		ls[i] = dlockLock{rw.Lock, rw.TryLock}
		if i < readers {
			ls[i] = dlockLock{rw.RLock, rw.TryRLock}
		}
	}
	ctx := context.Background()
	if err := warmPool(ctx, rdb, len(ls)); err != nil {
		return row, err
	}
	for _, l := range []locker{ls[0], ls[len(ls)-1]} { // load both sides' scripts
		unlock, err := l.Lock(ctx)
		if err != nil {
			return row, fmt.Errorf("rw mix warm-up: %w", err)
		}
		unlock(ctx)
	}
	check := &rwCheck{}
	excl := func(i int) exclusion {
		if i < readers {
			return readSide{check}
		}
		return writeSide{check}
	}
	end := time.Now().Add(b.dur)
	out := contend(ls, loop{hold: time.Millisecond, away: time.Millisecond}, excl, end, cnt)
	var reads, writes int
	for _, a := range out.Acqs {
		wait := ms(time.Duration(a.Acquired - a.Called))
		if a.Worker < readers {
			reads++
			row.LongestRead = max(row.LongestRead, wait)
		} else {
			writes++
			row.LongestWrite = max(row.LongestWrite, wait)
		}
	}
	// Waits still going on at the end count too.
	for _, a := range out.Unfinished {
		wait := ms(time.Duration(end.UnixNano() - a.Called))
		if a.Worker < readers {
			row.LongestRead = max(row.LongestRead, wait)
		} else {
			row.LongestWrite = max(row.LongestWrite, wait)
		}
	}
	secs := b.dur.Seconds()
	row.PerSec, row.ReadsSec, row.WritesSec = float64(reads+writes)/secs, float64(reads)/secs, float64(writes)/secs
	if reads+writes > 0 {
		row.RTPerAcq = float64(out.Commands) / float64(reads+writes)
	}
	row.Violations, row.Errors = out.Violations, out.Errors
	return row, nil
}
