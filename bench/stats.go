package main

import (
	"math"
	"slices"
	"sort"
	"time"
)

// percentile returns the p-th percentile (0 < p <= 100) of d by the
// nearest-rank method, or 0 for no data. It sorts d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	rank := int(math.Ceil(p / 100 * float64(len(d))))
	return d[min(max(rank, 1), len(d))-1]
}

// jain is Jain's fairness index of x: (Σx)² / (n·Σx²). 1 when all are
// equal, 1/n when one took everything; 1 for no data or all zero.
func jain(x []int) float64 {
	var sum, sq float64
	for _, v := range x {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(x)) * sq)
}

// acq is one acquisition: who took the lock, when it asked, when Lock
// returned and when Unlock returned (Unix nanoseconds, comparable across
// processes of one machine).
type acq struct {
	Worker   int   `json:"w"`
	Called   int64 `json:"c"`
	Acquired int64 `json:"a"`
	Released int64 `json:"r"`
}

// contention is what the contention scenarios report.
type contention struct {
	Acquisitions int     `json:"acquisitions"`
	PerSec       float64 `json:"acq_per_sec"`
	Ceiling      float64 `json:"ceiling_per_sec"` // 1s / the mean time held
	GapP50       float64 `json:"handoff_gap_p50_us"`
	GapP99       float64 `json:"handoff_gap_p99_us"`
	RTPerAcq     float64 `json:"round_trips_per_acq"`
	SameHolder   float64 `json:"same_holder_share"`
	Handoffs     float64 `json:"handoff_share"` // share taken by a caller already waiting at the previous release
	WaitP50      float64 `json:"wait_p50_ms"`   // of the Lock calls that returned
	WaitP99      float64 `json:"wait_p99_ms"`
	LongestWait  float64 `json:"longest_wait_ms"`
	LongestAt    float64 `json:"longest_wait_began_s"` // into the run
	// MostPassed is the most acquisitions granted to others while one
	// Lock call waited: at most the number of other waiters under FIFO.
	MostPassed  int     `json:"most_passed"`
	Jain        float64 `json:"jain"`
	Violations  int64   `json:"overlap_violations"`
	Errors      int     `json:"errors"`
	ErrorSample string  `json:"error_sample,omitempty"`
}

// summarize reads a run of secs seconds: acquisitions as taken by
// workers goroutines (numbered 0..workers-1), unfinished the Lock calls
// still waiting at the end, commands the commands sent.
func summarize(as []acq, workers int, unfinished []acq, end int64, secs float64, commands int64) contention {
	slices.SortFunc(as, func(a, b acq) int { return int(a.Acquired - b.Acquired) })
	c := contention{Acquisitions: len(as), PerSec: float64(len(as)) / secs}
	if len(as) > 0 {
		c.RTPerAcq = float64(commands) / float64(len(as))
	}
	counts := make([]int, workers)
	gaps := make([]time.Duration, 0, len(as))
	waits := make([]time.Duration, 0, len(as))
	var held, longest, longestAt int64
	first := end
	for _, a := range append(as[:len(as):len(as)], unfinished...) {
		first = min(first, a.Called)
	}
	same, handoffs := 0, 0
	for i, a := range as {
		counts[a.Worker]++
		held += a.Released - a.Acquired
		// as is sorted by Acquired: those granted while a waited.
		passed := i - sort.Search(i, func(j int) bool { return as[j].Acquired > a.Called })
		c.MostPassed = max(c.MostPassed, passed)
		if a.Acquired-a.Called > longest {
			longest, longestAt = a.Acquired-a.Called, a.Called
		}
		waits = append(waits, time.Duration(a.Acquired-a.Called))
		if i > 0 {
			// The next grant may reach its caller before the release's
			// reply reaches the releaser: count that as no gap.
			gaps = append(gaps, time.Duration(max(a.Acquired-as[i-1].Released, 0)))
			if a.Worker == as[i-1].Worker {
				same++
			}
			if a.Called < as[i-1].Released {
				handoffs++
			}
		}
	}
	// A Lock still waiting when the run ended has waited at least this
	// long: a starved waiter must not go unseen.
	for _, u := range unfinished {
		if end-u.Called > longest {
			longest, longestAt = end-u.Called, u.Called
		}
	}
	if len(as) > 0 {
		c.Ceiling = float64(time.Second) / (float64(held) / float64(len(as)))
	}
	if len(as) > 1 {
		c.SameHolder = float64(same) / float64(len(as)-1)
		c.Handoffs = float64(handoffs) / float64(len(as)-1)
	}
	c.GapP50 = us(percentile(gaps, 50))
	c.GapP99 = us(percentile(gaps, 99))
	c.WaitP50, c.WaitP99 = ms(percentile(waits, 50)), ms(percentile(waits, 99))
	c.LongestWait = float64(longest) / 1e6
	c.LongestAt = float64(longestAt-first) / 1e9
	c.Jain = jain(counts)
	return c
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
