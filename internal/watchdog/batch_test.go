package watchdog_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/watchdog"
)

// fakeBatch is a Batch whose leases are ints: it records every exchange
// and answers each renewal with reply(lease), after block returns.
type fakeBatch struct {
	mu        sync.Mutex
	exchanges [][]int
	reply     func(lease int) error
	block     func(ctx context.Context)
}

func (b *fakeBatch) Renew(ctx context.Context, rs []watchdog.Renewal) []error {
	leases := make([]int, len(rs))
	for i, r := range rs {
		leases[i] = r.Lease.(int)
	}
	b.mu.Lock()
	b.exchanges = append(b.exchanges, leases)
	b.mu.Unlock()
	if b.block != nil {
		b.block(ctx)
	}
	errs := make([]error, len(rs))
	for i, l := range leases {
		if b.reply != nil {
			errs[i] = b.reply(l)
		}
	}
	return errs
}

// renewedAt counts, per lease, how many renewals it got.
func (b *fakeBatch) renewed() (exchanges int, perLease map[int]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	perLease = map[int]int{}
	for _, e := range b.exchanges {
		for _, l := range e {
			perLease[l]++
		}
	}
	return len(b.exchanges), perLease
}

// batchedLeases starts n leases of ttl on loop, all in batch b, taken
// one after another over spread; Renew fails the test (a batched lease's
// automatic renewal must go through the batch).
func batchedLeases(t *testing.T, loop *watchdog.Loop, b watchdog.Batch, n int, ttl, spread time.Duration) ([]*watchdog.Watchdog, []*recorder) {
	t.Helper()
	dogs := make([]*watchdog.Watchdog, n)
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = newRecorder()
		cfg := watchdog.Config{
			TTL: ttl, Auto: true, Gone: isGone, OnLost: recs[i].onLost, Batch: b, Lease: i,
			Renew: func(ctx context.Context, ttl time.Duration) error {
				t.Errorf("lease %d renewed alone; want it in a batch", i)
				return nil
			},
		}
		dogs[i] = loop.Start(cfg, watchdog.Deadline(time.Now(), ttl))
		time.Sleep(spread / time.Duration(n))
	}
	return dogs, recs
}

// Leases of one Batch are renewed together: one exchange carries every
// lease due within a sixth of its TTL, so the exchanges are far fewer
// than the renewals, every lease is renewed in time, and none is lost.
func TestBatchRenewsLeasesTogether(t *testing.T) {
	t.Parallel()
	const n, ttl, run = 40, 600 * time.Millisecond, 1500 * time.Millisecond
	b := &fakeBatch{}
	dogs, recs := batchedLeases(t, watchdog.NewLoop(), b, n, ttl, ttl/3)
	time.Sleep(run)
	for _, d := range dogs {
		stopWithin(t, d, time.Second)
	}
	exchanges, per := b.renewed()
	for i, r := range recs {
		if _, losses := r.snapshot(); len(losses) > 0 {
			t.Errorf("lease %d lost though every renewal succeeded", i)
		}
		// Renewed every TTL/6 to TTL/3: at least run/(TTL/3) - 1 times.
		if per[i] < int(run/(ttl/3))-1 {
			t.Errorf("lease %d renewed %d times in %v; want at least %d (one per TTL/3)", i, per[i], run, int(run/(ttl/3))-1)
		}
	}
	// One exchange per TTL/6 at most (plus the first ones while the
	// leases are taken), against one per lease per TTL/3 alone.
	if max := int((run+ttl/3)/(ttl/6)) + 2; exchanges > max {
		t.Errorf("%d exchanges for %d leases in %v; want at most %d (one per TTL/6)", exchanges, n, run, max)
	}
	t.Logf("%d exchanges carried %d renewals", exchanges, sum(per))
}

func sum(m map[int]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// A batch in which one lease is gone loses that lease, at once, and no
// other: the others go on being renewed.
func TestBatchGoneLosesOnlyThatLease(t *testing.T) {
	t.Parallel()
	const n, gone, ttl = 10, 3, 600 * time.Millisecond
	b := &fakeBatch{reply: func(lease int) error {
		if lease == gone {
			return errGone
		}
		return nil
	}}
	start := time.Now()
	dogs, recs := batchedLeases(t, watchdog.NewLoop(), b, n, ttl, 0)
	at, lost := recs[gone].waitLost(ttl)
	if !lost {
		t.Fatalf("lease %d not lost though its renewal found it gone", gone)
	}
	if at.Sub(start) > ttl/3+100*time.Millisecond {
		t.Errorf("lease %d lost %v after start; want right after its first renewal (TTL/3 = %v)", gone, at.Sub(start), ttl/3)
	}
	time.Sleep(ttl)
	for i, r := range recs {
		if _, losses := r.snapshot(); i != gone && len(losses) > 0 {
			t.Errorf("lease %d lost; only lease %d was gone", i, gone)
		}
	}
	for _, d := range dogs {
		stopWithin(t, d, time.Second)
	}
	if _, per := b.renewed(); per[gone] != 1 {
		t.Errorf("lease %d renewed %d times; want once, the renewal that found it gone", gone, per[gone])
	}
}

// A batch that hangs (a client ignoring its context) cannot make any
// lease's loss come late: each is lost at its own deadline.
func TestHangingBatchLosesEachAtItsDeadline(t *testing.T) {
	t.Parallel()
	const n, ttl = 5, 400 * time.Millisecond
	release := make(chan struct{})
	defer close(release)
	b := &fakeBatch{block: func(context.Context) { <-release }}
	loop := watchdog.NewLoop()
	starts := make([]time.Time, n)
	recs := make([]*recorder, n)
	for i := range n {
		recs[i] = newRecorder()
		starts[i] = time.Now()
		cfg := watchdog.Config{TTL: ttl, Auto: true, Gone: isGone, OnLost: recs[i].onLost, Batch: b, Lease: i}
		loop.Start(cfg, watchdog.Deadline(starts[i], ttl))
		time.Sleep(30 * time.Millisecond)
	}
	for i, r := range recs {
		at, lost := r.waitLost(2 * ttl)
		if !lost {
			t.Fatalf("lease %d not lost while its batch hangs", i)
		}
		want := watchdog.Deadline(starts[i], ttl)
		if at.Before(want) || at.After(want.Add(50*time.Millisecond)) {
			t.Errorf("lease %d lost %v after it was taken; want at its deadline, %v", i, at.Sub(starts[i]), want.Sub(starts[i]))
		}
	}
}

// A Refresh of a lease whose renewal is in a batch in flight waits for
// the batch, then goes alone, through Renew.
func TestRefreshWaitsForBatchInFlight(t *testing.T) {
	t.Parallel()
	const ttl, longer = 600 * time.Millisecond, 2 * time.Second
	inBatch, release := make(chan struct{}), make(chan struct{})
	b := &fakeBatch{block: func(ctx context.Context) {
		select {
		case inBatch <- struct{}{}:
			<-release
		default:
		}
	}}
	r := newRecorder()
	cfg := watchdog.Config{TTL: ttl, Auto: true, Gone: isGone, OnLost: r.onLost, Batch: b, Lease: 0, Renew: r.renews}
	d := watchdog.NewLoop().Start(cfg, watchdog.Deadline(time.Now(), ttl))
	defer stopWithin(t, d, time.Second)
	select {
	case <-inBatch:
	case <-time.After(time.Second):
		t.Fatal("no batch sent")
	}
	refreshed := refreshAsync(d, context.Background(), longer)
	time.Sleep(30 * time.Millisecond)
	if calls, _ := r.snapshot(); len(calls) != 0 {
		t.Fatalf("the Refresh was sent while the batch was in flight")
	}
	released := time.Now()
	close(release)
	if err := result(t, refreshed, time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	calls, _ := r.snapshot()
	if len(calls) != 1 || calls[0].ttl != longer || calls[0].at.Before(released) {
		t.Errorf("Renew calls %+v; want one, with %v, after the batch returned", calls, longer)
	}
}

// A Loop watches any number of leases from one goroutine, which ends
// with the last watch.
func TestLoopRunsOneGoroutine(t *testing.T) {
	// Not parallel: it counts goroutines.
	const n, ttl = 1000, time.Minute
	before := runtime.NumGoroutine()
	b := &fakeBatch{}
	loop := watchdog.NewLoop()
	dogs := make([]*watchdog.Watchdog, n)
	for i := range dogs {
		cfg := watchdog.Config{TTL: ttl, Auto: true, Gone: isGone, OnLost: func(error) {}, Batch: b, Lease: i}
		dogs[i] = loop.Start(cfg, watchdog.Deadline(time.Now(), ttl))
	}
	if got := runtime.NumGoroutine() - before; got > 1 {
		t.Errorf("%d goroutines for %d leases; want 1", got, n)
	}
	for _, d := range dogs {
		d.Stop()
	}
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine() - before; got > 0 {
		t.Errorf("%d goroutines left after every watch stopped; want the loop's to end", got)
	}
}

// A batch that hangs past a lease's limit (a third of its TTL after the
// renewal was sent), whatever its context says (go-redis' reads wait for
// its ReadTimeout unless the client has ContextTimeoutEnabled), does not
// hold that lease's renewal: it is sent again in another exchange, which
// keeps the lease, rather than lost at its deadline.
func TestHungBatchSendsRenewalAgain(t *testing.T) {
	t.Parallel()
	const ttl = 900 * time.Millisecond
	var hung atomic.Bool
	release := make(chan struct{})
	defer close(release)
	b := &fakeBatch{block: func(context.Context) {
		if hung.CompareAndSwap(false, true) {
			<-release // the first exchange only, its ctx unheeded
		}
	}}
	dogs, recs := batchedLeases(t, watchdog.NewLoop(), b, 1, ttl, 0)
	if at, lost := recs[0].waitLost(3 * ttl); lost {
		t.Fatalf("lost at %v while its renewal's first exchange hung; want it sent again", at)
	}
	stopWithin(t, dogs[0], time.Second)
	if exchanges, _ := b.renewed(); exchanges < 3 {
		t.Errorf("%d exchanges in %v; want the hung one and renewals after it", exchanges, 3*ttl)
	}
}

// A batch that answers every renewal, but after a lease's limit (a third
// of its TTL), keeps the lease: the renewal sent again at the limit may
// be as slow, but the first's success, late as it is, still counts from
// its send time.
func TestSlowBatchKeepsLease(t *testing.T) {
	t.Parallel()
	const ttl = 900 * time.Millisecond
	b := &fakeBatch{block: func(context.Context) { time.Sleep(ttl/3 + 30*time.Millisecond) }}
	dogs, recs := batchedLeases(t, watchdog.NewLoop(), b, 1, ttl, 0)
	if at, lost := recs[0].waitLost(5 * ttl); lost {
		t.Fatalf("lost at %v though every renewal succeeded, each a little past its limit", at)
	}
	stopWithin(t, dogs[0], time.Second)
}

// OnLost may start and stop other watches of its Loop (a lease's hooks
// may take or release another lock): the loop tells losses with nothing
// held. Stop from OnLost waited for the loop's goroutine, which was the
// one running OnLost.
func TestOnLostMayStartAndStopOthers(t *testing.T) {
	t.Parallel()
	loop := watchdog.NewLoop()
	long := watchdog.Config{TTL: time.Minute, Gone: isGone, OnLost: func(error) {}}
	other := loop.Start(long, watchdog.Deadline(time.Now(), long.TTL))
	done := make(chan struct{})
	short := watchdog.Config{TTL: 50 * time.Millisecond, Gone: isGone, OnLost: func(error) {
		other.Stop()
		loop.Start(long, watchdog.Deadline(time.Now(), long.TTL)).Stop()
		close(done)
	}}
	loop.Start(short, watchdog.Deadline(time.Now(), short.TTL))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("OnLost still stopping another watch after 5s")
	}
}

// OnLost may stop a watch lost in the same tick, whose own loss is not
// told yet: Stop then ends it untold, as a Stop before the loss would.
func TestStopFromOnLostOfWatchLostAtOnce(t *testing.T) {
	t.Parallel()
	loop := watchdog.NewLoop()
	const ttl = 50 * time.Millisecond
	deadline := watchdog.Deadline(time.Now(), ttl)
	var other atomic.Pointer[watchdog.Watchdog]
	var otherTold atomic.Bool
	stopped := make(chan struct{})
	first := watchdog.Config{TTL: ttl, Gone: isGone, OnLost: func(error) {
		other.Load().Stop()
		close(stopped)
	}}
	second := watchdog.Config{TTL: ttl, Gone: isGone, OnLost: func(error) { otherTold.Store(true) }}
	loop.Start(first, deadline)
	other.Store(loop.Start(second, deadline))
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		t.Fatal("Stop from OnLost of a watch lost in the same tick still waiting after 3s")
	}
	if otherTold.Load() {
		t.Error("OnLost called for a watch after its Stop returned")
	}
}

// A Refresh that finds its lease lost returns ErrStopped only once the
// loss is told (OnLost): the lease's holder reads the loss's cause, not
// one it makes up from ErrStopped. The loss is told after the loop lets
// go of its mutex, here held back by a slow OnLost of another lease lost
// in the same tick.
func TestRefreshStoppedAfterOnLost(t *testing.T) {
	t.Parallel()
	loop := watchdog.NewLoop()
	const ttl = 50 * time.Millisecond
	deadline := watchdog.Deadline(time.Now(), ttl)
	inFirst := make(chan struct{})
	first := watchdog.Config{TTL: ttl, Gone: isGone, OnLost: func(error) {
		close(inFirst)
		time.Sleep(200 * time.Millisecond) // a slow hook
	}}
	var secondLost atomic.Bool
	second := watchdog.Config{TTL: ttl, Gone: isGone, Renew: func(context.Context, time.Duration) error { return nil },
		OnLost: func(error) { secondLost.Store(true) }}
	loop.Start(first, deadline)
	d := loop.Start(second, deadline)
	<-inFirst
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := d.Refresh(ctx, ttl)
	lostYet := secondLost.Load()
	d.Stop()
	if !errors.Is(err, watchdog.ErrStopped) || !lostYet {
		t.Fatalf("Refresh of a lease lost in the same tick: %v, OnLost called before %v; want ErrStopped after OnLost", err, lostYet)
	}
}
