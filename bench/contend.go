package main

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// exclusion checks mutual exclusion inside the critical section, outside
// Redis: enter reports whether the caller is alone in it.
type exclusion interface {
	enter() bool
	leave()
}

// holders counts the goroutines of this process in the critical section.
type holders struct{ n atomic.Int64 }

func (h *holders) enter() bool { return h.n.Add(1) == 1 }
func (h *holders) leave()      { h.n.Add(-1) }

// marker checks across processes: entering creates a file with O_EXCL,
// which fails while another holder's file exists.
type marker struct {
	path  string
	local holders
	mine  atomic.Bool
}

func (m *marker) enter() bool {
	alone := m.local.enter()
	f, err := os.OpenFile(m.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	f.Close()
	m.mine.Store(true)
	return alone
}

func (m *marker) leave() {
	if m.mine.Swap(false) {
		os.Remove(m.path)
	}
	m.local.leave()
}

// nobody checks nothing: for runs where every goroutine has its own key.
type nobody struct{}

func (nobody) enter() bool { return true }
func (nobody) leave()      {}

// one returns an exclusion for every worker alike.
func one(e exclusion) func(int) exclusion { return func(int) exclusion { return e } }

// loop is how the workers of a contention run behave.
type loop struct {
	hold time.Duration // time in the critical section
	away time.Duration // pause after unlocking, before the next Lock
	// base numbers the workers of this process, so that the workers of
	// several processes stay apart.
	base int
}

// outcome is what the workers of one process did.
type outcome struct {
	Acqs       []acq  `json:"acqs"`
	Unfinished []acq  `json:"unfinished"` // Lock calls still waiting at the end
	Violations int64  `json:"violations"`
	Commands   int64  `json:"commands"` // sent until the end
	Errors     int    `json:"errors"`
	ErrSample  string `json:"err_sample,omitempty"`
}

// contend runs one worker per locker from now until end and collects
// what they did. Worker i checks exclusion with excl(i); cnt counts the
// commands of the process's client.
func contend(lockers []locker, lp loop, excl func(i int) exclusion, end time.Time, cnt *counter) outcome {
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var (
		mu  sync.Mutex
		out outcome
		wg  sync.WaitGroup
	)
	// Count the commands sent until the end: Unlocks after it and
	// waiters giving up are not part of the run.
	start, snapped := cnt.n.Load(), make(chan int64, 1)
	time.AfterFunc(time.Until(end), func() { snapped <- cnt.n.Load() })
	for i, l := range lockers {
		excl := excl(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []acq
			for {
				called := time.Now()
				if !called.Before(end) {
					break
				}
				unlock, err := l.Lock(ctx)
				if err != nil {
					mu.Lock()
					if ctx.Err() != nil {
						out.Unfinished = append(out.Unfinished, acq{Worker: lp.base + i, Called: called.UnixNano()})
					} else {
						out.Errors++
						if out.ErrSample == "" {
							out.ErrSample = err.Error()
						}
					}
					mu.Unlock()
					if ctx.Err() != nil {
						break
					}
					time.Sleep(retryDelay)
					continue
				}
				acquired := time.Now()
				alone := excl.enter()
				time.Sleep(lp.hold)
				excl.leave()
				err = unlock(context.Background())
				released := time.Now()
				if !alone || err != nil {
					mu.Lock()
					if !alone {
						out.Violations++
					}
					if err != nil {
						out.Errors++
						out.ErrSample = "unlock: " + err.Error()
					}
					mu.Unlock()
				}
				if acquired.Before(end) {
					mine = append(mine, acq{lp.base + i, called.UnixNano(), acquired.UnixNano(), released.UnixNano()})
				}
				time.Sleep(lp.away)
			}
			mu.Lock()
			out.Acqs = append(out.Acqs, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait() // workers stop only once end has passed
	out.Commands = <-snapped - start
	return out
}
