package main

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {99, 10}, {10, 1}, {100, 10}, {1, 1}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		x    []int
		want float64
	}{
		{[]int{3, 3, 3, 3}, 1},
		{[]int{8, 0, 0, 0}, 0.25},
		{[]int{1, 2}, 0.9},
		{nil, 1},
	} {
		if got := jain(c.x); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("jain(%v) = %v, want %v", c.x, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	ms := int64(time.Millisecond)
	as := []acq{
		{Worker: 1, Called: -1, Acquired: 2 * ms, Released: 3 * ms}, // waited while worker 0 was served
		{Worker: 0, Called: 0, Acquired: 0, Released: 1 * ms},
		{Worker: 1, Called: 3 * ms, Acquired: 4 * ms, Released: 5 * ms},
	}
	c := summarize(as, 2, []acq{{Worker: 0, Called: 0}}, 10*ms, 1, 9)
	if c.Acquisitions != 3 || c.RTPerAcq != 3 {
		t.Errorf("acquisitions %d, rt/acq %v", c.Acquisitions, c.RTPerAcq)
	}
	if c.GapP50 != 1000 || c.GapP99 != 1000 {
		t.Errorf("gaps p50 %v p99 %v, want 1000µs", c.GapP50, c.GapP99)
	}
	if c.MostPassed != 1 {
		t.Errorf("most passed %d, want 1", c.MostPassed)
	}
	if c.Handoffs != 0.5 {
		t.Errorf("handoffs %v, want 0.5", c.Handoffs)
	}
	if c.SameHolder != 0.5 {
		t.Errorf("same holder %v, want 0.5", c.SameHolder)
	}
	if c.LongestWait != 10 {
		t.Errorf("longest wait %vms, want 10 (the unfinished one)", c.LongestWait)
	}
	if c.Ceiling != 1000 {
		t.Errorf("ceiling %v, want 1000", c.Ceiling)
	}
	if math.Abs(c.Jain-0.9) > 1e-9 {
		t.Errorf("jain %v, want 0.9", c.Jain)
	}
}
