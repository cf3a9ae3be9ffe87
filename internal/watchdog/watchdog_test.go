package watchdog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-dlock/dlock/internal/watchdog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errGone      = errors.New("lease gone")
	errTransient = errors.New("connection reset")
)

func isGone(err error) bool { return errors.Is(err, errGone) }

// call is one invocation of a fake Renew.
type call struct {
	at       time.Time
	ttl      time.Duration
	deadline time.Time // zero if the context had none
}

// recorder records Renew and OnLost calls.
type recorder struct {
	mu     sync.Mutex
	calls  []call
	losses []time.Time
	causes []error       // OnLost's, in order
	lost   chan struct{} // closed at the first OnLost
	once   sync.Once
}

func newRecorder() *recorder { return &recorder{lost: make(chan struct{})} }

// watch starts a watchdog on a lease of ttl taken at start, renewed by
// renew (automatically when auto), whose loss r records.
func (r *recorder) watch(start time.Time, ttl time.Duration, auto bool, renew func(ctx context.Context, ttl time.Duration) error) *watchdog.Watchdog {
	cfg := watchdog.Config{TTL: ttl, Auto: auto, Renew: renew, Gone: isGone, OnLost: r.onLost}
	return watchdog.Start(cfg, watchdog.Deadline(start, ttl))
}

// renewCalled records a Renew call and returns its number, from 1.
func (r *recorder) renewCalled(ctx context.Context, ttl time.Duration) int {
	c := call{at: time.Now(), ttl: ttl}
	c.deadline, _ = ctx.Deadline()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	return len(r.calls)
}

// renews records a Renew call that succeeds.
func (r *recorder) renews(ctx context.Context, ttl time.Duration) error {
	r.renewCalled(ctx, ttl)
	return nil
}

func (r *recorder) onLost(cause error) {
	r.mu.Lock()
	r.losses = append(r.losses, time.Now())
	r.causes = append(r.causes, cause)
	r.mu.Unlock()
	r.once.Do(func() { close(r.lost) })
}

func (r *recorder) snapshot() ([]call, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...), append([]time.Time(nil), r.losses...)
}

// waitLost waits at most d for OnLost and returns when it first ran.
func (r *recorder) waitLost(d time.Duration) (time.Time, bool) {
	select {
	case <-r.lost:
		_, losses := r.snapshot()
		return losses[0], true
	case <-time.After(d):
		return time.Time{}, false
	}
}

// stopWithin calls Stop and fails the test if it takes longer than d.
func stopWithin(t *testing.T, w *watchdog.Watchdog, d time.Duration) time.Time {
	t.Helper()
	done := make(chan time.Time, 1)
	go func() { d, _ := w.Stop(); done <- d }()
	select {
	case deadline := <-done:
		return deadline
	case <-time.After(d):
		t.Fatalf("Stop did not return within %v", d)
		return time.Time{}
	}
}

// refreshAsync runs Refresh in a goroutine; the result arrives on the
// returned channel.
func refreshAsync(w *watchdog.Watchdog, ctx context.Context, ttl time.Duration) <-chan error {
	out := make(chan error, 1)
	go func() { out <- w.Refresh(ctx, ttl) }()
	return out
}

// result waits at most d for a Refresh result.
func result(t *testing.T, c <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(d):
		t.Fatalf("Refresh did not return within %v", d)
		return nil
	}
}

func TestMarginAndDeadline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ ttl, want time.Duration }{
		{100 * time.Millisecond, 25 * time.Millisecond},
		{300 * time.Millisecond, 50 * time.Millisecond},
		{time.Second, 100 * time.Millisecond},
		{5 * time.Second, 500 * time.Millisecond},
		{10 * time.Second, time.Second},
		{time.Minute, time.Second},
	} {
		if got := watchdog.Margin(c.ttl); got != c.want {
			t.Errorf("Margin(%v) = %v, want %v", c.ttl, got, c.want)
		}
		sent := time.Now()
		if got, want := watchdog.Deadline(sent, c.ttl), sent.Add(c.ttl-c.want); !got.Equal(want) {
			t.Errorf("Deadline(sent, %v) = sent+%v, want sent+%v", c.ttl, got.Sub(sent), want.Sub(sent))
		}
	}
}

// Automatic renewals run every TTL/3, each measured from when the previous
// one was sent, with the configured TTL and a context bounded by TTL/3.
func TestRenewsEveryThirdOfTTL(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	r := newRecorder()
	start := time.Now()
	w := r.watch(start, ttl, true, r.renews)
	time.Sleep(time.Second)
	stopWithin(t, w, time.Second)
	elapsed := time.Since(start)

	calls, losses := r.snapshot()
	if len(losses) != 0 {
		t.Errorf("OnLost called %d times though every renewal succeeded", len(losses))
	}
	// One renewal per 100ms: at most elapsed/(TTL/3), and not far below
	// that unless the machine stalls for whole periods.
	if max := int(elapsed / (ttl / 3)); len(calls) > max || len(calls) < 5 {
		t.Errorf("%d renewals in %v; want between 5 and %d (one per TTL/3)", len(calls), elapsed, max)
	}
	if len(calls) > 0 {
		if first := calls[0].at.Sub(start); first < ttl/3 || first > ttl/3+60*time.Millisecond {
			t.Errorf("first renewal %v after the lease was acquired; want about TTL/3 = %v", first, ttl/3)
		}
	}
	for i, c := range calls {
		if c.ttl != ttl {
			t.Errorf("renewal %d asked for TTL %v, want %v", i, c.ttl, ttl)
		}
		if c.deadline.IsZero() {
			t.Errorf("renewal %d has a context without deadline", i)
		} else if d := c.deadline.Sub(c.at); d > ttl/3 {
			t.Errorf("renewal %d may run for %v; want at most TTL/3 = %v", i, d, ttl/3)
		}
		if i > 0 {
			// The goroutine running Renew may start a little late, so
			// allow some slack below TTL/3.
			if gap := c.at.Sub(calls[i-1].at); gap < ttl/3-20*time.Millisecond {
				t.Errorf("renewal %d came %v after the previous one; want about TTL/3 = %v", i, gap, ttl/3)
			}
		}
	}
}

// A renewal that reports the lease gone ends the watchdog at once: OnLost
// runs right after that renewal, long before the TTL runs out, and no
// renewal follows.
func TestGoneRenewalLosesAtOnce(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	r := newRecorder()
	start := time.Now()
	w := r.watch(start, ttl, true, func(ctx context.Context, ttl time.Duration) error {
		r.renewCalled(ctx, ttl)
		return errors.Join(errors.New("refresh"), errGone) // wrapped
	})
	at, ok := r.waitLost(2 * ttl)
	if !ok {
		stopWithin(t, w, time.Second)
		t.Fatal("OnLost not called after a renewal reported the lease gone")
	}
	calls, _ := r.snapshot()
	if len(calls) != 1 {
		t.Fatalf("%d renewals before OnLost, want 1", len(calls))
	}
	if d := at.Sub(calls[0].at); d > 100*time.Millisecond {
		t.Errorf("OnLost ran %v after the renewal that found the lease gone; want promptly", d)
	}
	if at.After(start.Add(ttl / 2)) {
		t.Errorf("OnLost ran %v after start; want about TTL/3 (%v), well before TTL %v", at.Sub(start), ttl/3, ttl)
	}
	stopWithin(t, w, time.Second) // the goroutine ended on loss
	if err := w.Refresh(context.Background(), ttl); !errors.Is(err, watchdog.ErrStopped) {
		t.Errorf("Refresh after loss: %v, want ErrStopped", err)
	}
	time.Sleep(ttl / 2) // past two more renewal periods
	calls, losses := r.snapshot()
	if len(calls) != 1 || len(losses) != 1 {
		t.Errorf("after loss: %d renewals, %d OnLost calls; want 1 and 1", len(calls), len(losses))
	}
}

// A renewal that hangs until its context ends, like one sent to a paused
// Redis, cannot keep the lease alive: OnLost runs once, after TTL-Margin
// from when the lease was acquired and before TTL, i.e. before the lease
// could have expired on the server.
func TestHangingRenewalLosesBeforeTTL(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	r := newRecorder()
	var ended sync.Map // renewal number -> ctx.Err() when it returned
	start := time.Now()
	w := r.watch(start, ttl, true, func(ctx context.Context, ttl time.Duration) error {
		n := r.renewCalled(ctx, ttl)
		<-ctx.Done()
		ended.Store(n, ctx.Err())
		return ctx.Err()
	})
	at, ok := r.waitLost(2 * ttl)
	if !ok {
		stopWithin(t, w, time.Second)
		t.Fatalf("OnLost not called within %v though no renewal succeeded", 2*ttl)
	}
	if !at.Before(start.Add(ttl)) {
		t.Errorf("OnLost ran %v after the lease was acquired; want before the TTL %v, when the server may give the lock away", at.Sub(start), ttl)
	}
	if min := watchdog.Deadline(start, ttl); at.Before(min) {
		t.Errorf("OnLost ran %v after the lease was acquired; want not before TTL-Margin = %v", at.Sub(start), min.Sub(start))
	}
	stopWithin(t, w, time.Second)
	time.Sleep(200 * time.Millisecond)
	calls, losses := r.snapshot()
	if len(losses) != 1 {
		t.Errorf("OnLost called %d times, want exactly once", len(losses))
	}
	if len(calls) < 2 {
		t.Errorf("%d renewal attempts; want a retry after the first one timed out", len(calls))
	}
	for i, c := range calls {
		if c.deadline.After(watchdog.Deadline(start, ttl)) {
			t.Errorf("renewal %d may run until %v after start, past the loss deadline", i, c.deadline.Sub(start))
		}
		if err, _ := ended.Load(i + 1); err == nil {
			t.Errorf("renewal %d still running after the watchdog ended", i)
		}
	}
}

// A Renew that ignores its context (a client whose socket timeouts do not
// honour contexts) still cannot delay OnLost past the TTL.
func TestRenewIgnoringContextLosesBeforeTTL(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	r := newRecorder()
	release := make(chan struct{})
	start := time.Now()
	w := r.watch(start, ttl, true, func(ctx context.Context, ttl time.Duration) error {
		r.renewCalled(ctx, ttl)
		<-release
		return errTransient
	})
	at, ok := r.waitLost(2 * ttl)
	close(release) // lets the hung renewal, and so the watchdog, end
	stopWithin(t, w, time.Second)
	if !ok {
		t.Fatalf("OnLost not called within %v while the renewal hung", 2*ttl)
	}
	if !at.Before(start.Add(ttl)) {
		t.Errorf("OnLost ran %v after the lease was acquired; want before TTL %v", at.Sub(start), ttl)
	}
	// The hung renewal is given up at its limit, a third of the way, and
	// sent again (it hangs too): a few renewals, one loss.
	if calls, losses := r.snapshot(); len(calls) < 1 || len(calls) > 4 || len(losses) != 1 {
		t.Errorf("%d renewals and %d OnLost calls; want 1 to 4 and 1", len(calls), len(losses))
	}
}

// Renewals that fail with a non-Gone error are retried soon, and one that
// succeeds before the deadline keeps the lease.
func TestTransientFailuresAreRetried(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	r := newRecorder()
	start := time.Now()
	w := r.watch(start, ttl, true, func(ctx context.Context, ttl time.Duration) error {
		if r.renewCalled(ctx, ttl) <= 3 {
			return errTransient
		}
		return nil
	})
	if at, lost := r.waitLost(2 * ttl); lost {
		t.Errorf("OnLost called %v after start though a retry succeeded", at.Sub(start))
	}
	stopWithin(t, w, time.Second)
	calls, _ := r.snapshot()
	if len(calls) < 5 {
		t.Fatalf("%d renewal attempts in %v; want the 3 failures retried, then regular renewals", len(calls), 2*ttl)
	}
	// Retries come about TTL/10 after a failure, not a whole TTL/3 later.
	for i := 1; i <= 3; i++ {
		gap := calls[i].at.Sub(calls[i-1].at)
		if gap < ttl/10-10*time.Millisecond || gap > ttl/3 {
			t.Errorf("retry %d came %v after the failure; want about TTL/10 = %v", i, gap, ttl/10)
		}
	}
	// The 4th attempt succeeded, so the lease lives on beyond the
	// original deadline: renewals continue past it.
	if last := calls[len(calls)-1].at; !last.After(start.Add(ttl)) {
		t.Errorf("last renewal %v after start; want renewals past the original TTL", last.Sub(start))
	}
}

// Without automatic renewal (and here without Renew at all), the lease is
// declared lost once its TTL, less the margin, has run out.
func TestNoAutoRenewLosesAtTTL(t *testing.T) {
	t.Parallel()
	const ttl = 400 * time.Millisecond
	r := newRecorder()
	start := time.Now()
	w := r.watch(start, ttl, false, nil)
	defer stopWithin(t, w, time.Second)
	at, ok := r.waitLost(2 * ttl)
	if !ok {
		t.Fatalf("OnLost not called within %v without renewals", 2*ttl)
	}
	want := watchdog.Deadline(start, ttl)
	if at.Before(want) || at.After(want.Add(30*time.Millisecond)) {
		t.Errorf("OnLost ran %v after start; want at TTL-Margin = %v", at.Sub(start), want.Sub(start))
	}
}

// A manual Refresh moves the deadline: OnLost does not run at the original
// deadline but TTL-Margin after the Refresh was sent.
func TestRefreshPushesDeadline(t *testing.T) {
	t.Parallel()
	const ttl = 400 * time.Millisecond
	r := newRecorder()
	start := time.Now()
	w := r.watch(start, ttl, false, r.renews)
	defer stopWithin(t, w, time.Second)
	time.Sleep(ttl / 2)
	before := time.Now()
	if err := result(t, refreshAsync(w, context.Background(), ttl), time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	calls, _ := r.snapshot()
	if len(calls) != 1 || calls[0].ttl != ttl {
		t.Fatalf("Refresh made renewals %+v; want one with TTL %v", calls, ttl)
	}
	if at, lost := r.waitLost(time.Until(watchdog.Deadline(start, ttl)) + 50*time.Millisecond); lost {
		t.Fatalf("OnLost ran %v after start, at the original deadline, though the lease was refreshed at %v",
			at.Sub(start), before.Sub(start))
	}
	at, ok := r.waitLost(ttl)
	if !ok {
		t.Fatal("OnLost not called after the refreshed TTL ran out")
	}
	if at.Before(watchdog.Deadline(before, ttl)) || !at.Before(calls[0].at.Add(ttl)) {
		t.Errorf("OnLost ran %v after the Refresh; want between TTL-Margin %v and TTL %v",
			at.Sub(before), ttl-watchdog.Margin(ttl), ttl)
	}
	if calls, _ := r.snapshot(); len(calls) != 1 {
		t.Errorf("%d renewals without Auto; want only the one Refresh asked for", len(calls))
	}
}

// Refresh also sets the TTL that later automatic renewals ask for, and
// their period.
func TestRefreshChangesTTLOfLaterRenewals(t *testing.T) {
	t.Parallel()
	const ttl, newTTL = 300 * time.Millisecond, 900 * time.Millisecond
	r := newRecorder()
	start := time.Now()
	w := r.watch(start, ttl, true, r.renews)
	time.Sleep(50 * time.Millisecond) // before the first automatic renewal, at 100ms
	if err := result(t, refreshAsync(w, context.Background(), newTTL), time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	time.Sleep(newTTL)
	stopWithin(t, w, time.Second)

	calls, losses := r.snapshot()
	if len(losses) != 0 {
		t.Errorf("OnLost called %d times", len(losses))
	}
	// The Refresh's own renewal, then one per newTTL/3.
	if len(calls) < 3 || len(calls) > 4 {
		t.Fatalf("%d renewals; want the Refresh and 2 or 3 automatic ones (one per newTTL/3 = %v)", len(calls), newTTL/3)
	}
	for i, c := range calls {
		if c.ttl != newTTL {
			t.Errorf("renewal %d asked for TTL %v, want the new TTL %v", i, c.ttl, newTTL)
		}
		if i > 0 {
			if gap := c.at.Sub(calls[i-1].at); gap < newTTL/3-20*time.Millisecond {
				t.Errorf("renewal %d came %v after the previous one; want about newTTL/3 = %v", i, gap, newTTL/3)
			}
		}
	}
}

// A Refresh may shorten the lease (PEXPIRE to a smaller TTL): the watchdog
// must then declare it lost by the new, earlier expiry.
func TestShorterRefreshMovesDeadlineEarlier(t *testing.T) {
	t.Parallel()
	const ttl, shorter = time.Second, 200 * time.Millisecond
	r := newRecorder()
	start := time.Now()
	w := r.watch(start, ttl, false, r.renews)
	defer stopWithin(t, w, time.Second)
	if err := result(t, refreshAsync(w, context.Background(), shorter), time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	calls, _ := r.snapshot()
	at, ok := r.waitLost(2 * ttl)
	if !ok {
		t.Fatal("OnLost not called")
	}
	if !at.Before(calls[0].at.Add(shorter)) {
		t.Errorf("OnLost ran %v after a Refresh shortened the lease to %v; want before that, "+
			"when another client may take the lock", at.Sub(calls[0].at), shorter)
	}
}

// A shortening Refresh may be applied by Redis at once and answered
// late: the deadline moves when it is sent, not when its reply comes, or
// the holder would go on after the key expired and another client took
// the lock (found by model/election.pml).
func TestShorterRefreshInFlightMovesDeadlineEarlier(t *testing.T) {
	t.Parallel()
	const ttl, shorter, late = 2 * time.Second, 200 * time.Millisecond, time.Second
	r := newRecorder()
	replied := make(chan struct{})
	w := r.watch(time.Now(), ttl, false, func(ctx context.Context, ttl time.Duration) error {
		defer close(replied)
		r.renewCalled(ctx, ttl)
		time.Sleep(late) // applied, but its reply is slow, whatever ctx says
		return nil
	})
	defer func() { <-replied }()
	defer stopWithin(t, w, 2*late)
	refreshed := refreshAsync(w, context.Background(), shorter)
	at, ok := r.waitLost(2 * ttl)
	if !ok {
		t.Fatal("OnLost not called")
	}
	calls, _ := r.snapshot()
	if !at.Before(calls[0].at.Add(shorter)) {
		t.Errorf("OnLost ran %v after a Refresh to %v was sent, its reply still on the way; want before %v, "+
			"when the key may have expired", at.Sub(calls[0].at), shorter, shorter)
	}
	if err := result(t, refreshed, 2*late); err == nil {
		t.Errorf("Refresh returned nil for a lease lost before its reply")
	}
}

// A shortening Refresh that fails may still have been applied by Redis:
// the deadline moves as if it had been, and later successes are reckoned
// with the shorter TTL too, until the next success.
func TestFailedShorterRefreshMovesDeadlineEarlier(t *testing.T) {
	t.Parallel()
	const ttl, shorter = time.Second, 200 * time.Millisecond
	r := newRecorder()
	start := time.Now()
	w := r.watch(start, ttl, false, func(ctx context.Context, ttl time.Duration) error {
		r.renewCalled(ctx, ttl)
		return errTransient // e.g. the reply was lost
	})
	defer stopWithin(t, w, time.Second)
	if err := result(t, refreshAsync(w, context.Background(), shorter), time.Second); !errors.Is(err, errTransient) {
		t.Fatalf("Refresh: %v, want Renew's error", err)
	}
	calls, _ := r.snapshot()
	at, ok := r.waitLost(2 * ttl)
	if !ok {
		t.Fatal("OnLost not called")
	}
	if !at.Before(calls[0].at.Add(shorter)) {
		t.Errorf("OnLost ran %v after a failed Refresh to %v; want before that, as Redis may have applied it",
			at.Sub(calls[0].at), shorter)
	}
}

// Renewals are serialised: a Refresh during an automatic renewal waits for
// it, and each success counts for the TTL that write carried, not for a TTL
// set meanwhile.
func TestRefreshWaitsForRenewalInFlight(t *testing.T) {
	t.Parallel()
	const ttl, longer = 600 * time.Millisecond, 3 * time.Second
	r := newRecorder()
	inFirst := make(chan struct{})
	releaseFirst := make(chan struct{})
	var released time.Time
	start := time.Now()
	w := r.watch(start, ttl, true, func(ctx context.Context, ttl time.Duration) error {
		switch r.renewCalled(ctx, ttl) {
		case 1: // the automatic renewal: in flight until released
			close(inFirst)
			select {
			case <-releaseFirst:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case 2: // the Refresh: succeeds
			return nil
		}
		<-ctx.Done() // later renewals: Redis stalls
		return ctx.Err()
	})
	defer stopWithin(t, w, time.Second)
	select {
	case <-inFirst:
	case <-time.After(time.Second):
		t.Fatal("no automatic renewal")
	}
	refreshed := refreshAsync(w, context.Background(), longer)
	time.Sleep(30 * time.Millisecond)
	if calls, _ := r.snapshot(); len(calls) != 1 {
		t.Fatalf("%d renewals while the first was in flight; want the Refresh to wait for it", len(calls))
	}
	released = time.Now()
	close(releaseFirst)
	if err := result(t, refreshed, time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	calls, _ := r.snapshot()
	if len(calls) != 2 || calls[0].ttl != ttl || calls[1].ttl != longer {
		t.Fatalf("renewals %+v; want the automatic one with %v, then the Refresh with %v", calls, ttl, longer)
	}
	if calls[1].at.Before(released) {
		t.Errorf("the Refresh's write started %v before the renewal in flight completed", released.Sub(calls[1].at))
	}
	// The Refresh set 3s: later automatic renewals (which hang) ask for 3s,
	// and the lease holds until about 2.7s after the Refresh.
	if at, lost := r.waitLost(1500 * time.Millisecond); lost {
		t.Fatalf("OnLost ran %v after the Refresh to %v", at.Sub(calls[1].at), longer)
	}
	calls, _ = r.snapshot()
	if len(calls) < 3 || calls[2].ttl != longer {
		t.Errorf("renewals after the Refresh %+v; want automatic ones with TTL %v", calls[2:], longer)
	}
}

// A Refresh whose context ends returns ctx.Err() at once, even while its
// write is stuck.
func TestRefreshContextEnds(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	r := newRecorder()
	w := r.watch(time.Now(), ttl, false, func(ctx context.Context, ttl time.Duration) error {
		r.renewCalled(ctx, ttl)
		<-ctx.Done()
		return ctx.Err()
	})
	defer stopWithin(t, w, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := result(t, refreshAsync(w, ctx, ttl), time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Refresh with an ending context: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("Refresh returned %v after its context ended", d-50*time.Millisecond)
	}
}

// A Refresh that finds the lease gone returns Renew's error and the
// watchdog reports the loss once.
func TestRefreshGoneLoses(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	r := newRecorder()
	w := r.watch(time.Now(), ttl, false, func(ctx context.Context, ttl time.Duration) error {
		r.renewCalled(ctx, ttl)
		return errGone
	})
	if err := result(t, refreshAsync(w, context.Background(), ttl), time.Second); !errors.Is(err, errGone) {
		t.Errorf("Refresh of a gone lease: %v, want Renew's error", err)
	}
	if _, ok := r.waitLost(500 * time.Millisecond); !ok {
		t.Error("OnLost not called after a Refresh found the lease gone")
	}
	stopWithin(t, w, time.Second)
	if err := w.Refresh(context.Background(), ttl); !errors.Is(err, watchdog.ErrStopped) {
		t.Errorf("Refresh after loss: %v, want ErrStopped", err)
	}
	if _, losses := r.snapshot(); len(losses) != 1 {
		t.Errorf("OnLost called %d times, want once", len(losses))
	}
}

// Stop before the deadline: OnLost never runs, the renewal in flight is
// cancelled, a second Stop is harmless, Refresh afterwards fails with
// ErrStopped, and no goroutine is left.
func TestStopBeforeLoss(t *testing.T) {
	// Not parallel: goleak.VerifyNone must not see other tests' goroutines.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const ttl = 300 * time.Millisecond
	r := newRecorder()
	started := make(chan struct{}, 1)
	renewEnded := make(chan error, 1)
	start := time.Now()
	w := r.watch(start, ttl, true, func(ctx context.Context, ttl time.Duration) error {
		r.renewCalled(ctx, ttl)
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done() // in flight until Stop cancels it
		renewEnded <- ctx.Err()
		return ctx.Err()
	})
	select {
	case <-started:
	case <-time.After(time.Second):
		t.Fatal("no renewal started")
	}
	t0 := time.Now()
	deadline := stopWithin(t, w, time.Second)
	if d := time.Since(t0); d > 50*time.Millisecond {
		t.Errorf("Stop took %v with a renewal in flight; want it to cancel the renewal", d)
	}
	if want := watchdog.Deadline(start, ttl); !deadline.Equal(want) {
		t.Errorf("Stop returned deadline start+%v, want start+%v (nothing renewed)", deadline.Sub(start), want.Sub(start))
	}
	// Stop does not wait for the renewal (a client may ignore its
	// context), but cancels it.
	select {
	case err := <-renewEnded:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("in-flight renewal's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Error("in-flight renewal not cancelled by Stop")
	}
	if again := stopWithin(t, w, time.Second); !again.Equal(deadline) {
		t.Errorf("second Stop returned a different deadline")
	}
	if err := result(t, refreshAsync(w, context.Background(), ttl), time.Second); !errors.Is(err, watchdog.ErrStopped) {
		t.Errorf("Refresh after Stop: %v, want ErrStopped", err)
	}
	time.Sleep(ttl) // past the deadline
	if calls, losses := r.snapshot(); len(losses) != 0 || len(calls) != 1 {
		t.Errorf("after Stop: %d OnLost calls and %d renewals; want 0 and 1", len(losses), len(calls))
	}
}

// Stop returns the deadline reached, from which a new watchdog takes over
// (as after a failed Unlock); Stop after loss returns at once.
func TestStopDeadlineHandsOver(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const ttl = 300 * time.Millisecond
	r := newRecorder()
	cfg := watchdog.Config{
		TTL: ttl,
		Renew: func(ctx context.Context, ttl time.Duration) error {
			r.renewCalled(ctx, ttl)
			return nil
		},
		Gone:   isGone,
		OnLost: r.onLost,
	}
	start := time.Now()
	w := watchdog.Start(cfg, watchdog.Deadline(start, ttl))
	time.Sleep(100 * time.Millisecond)
	before := time.Now()
	if err := result(t, refreshAsync(w, context.Background(), ttl), time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	calls, _ := r.snapshot()
	deadline := stopWithin(t, w, 100*time.Millisecond)
	if deadline.Before(watchdog.Deadline(before, ttl)) || deadline.After(watchdog.Deadline(calls[0].at, ttl)) {
		t.Errorf("Stop returned deadline %v after the Refresh; want TTL-Margin = %v", deadline.Sub(before), ttl-watchdog.Margin(ttl))
	}
	time.Sleep(ttl) // the stopped watchdog's deadline passes silently
	if _, losses := r.snapshot(); len(losses) != 0 {
		t.Fatalf("OnLost called %d times after Stop", len(losses))
	}

	r = newRecorder()
	cfg.OnLost = r.onLost
	start = time.Now()
	deadline = watchdog.Deadline(start, ttl)
	w = watchdog.Start(cfg, deadline)
	at, ok := r.waitLost(time.Second)
	if !ok {
		t.Fatal("OnLost not called by the watchdog taking over")
	}
	if at.Before(deadline) || at.After(deadline.Add(30*time.Millisecond)) {
		t.Errorf("OnLost ran %v after start, want at the deadline handed over, %v", at.Sub(start), deadline.Sub(start))
	}
	if got := stopWithin(t, w, 100*time.Millisecond); !got.Equal(deadline) {
		t.Errorf("Stop after loss returned start+%v, want start+%v", got.Sub(start), deadline.Sub(start))
	}
	if _, losses := r.snapshot(); len(losses) != 1 {
		t.Errorf("OnLost called %d times, want once", len(losses))
	}
}

// A write still in flight when Stop is called may be applied by Redis. If
// it shortened the lease, the deadline Stop returns (from which a new
// watchdog takes over after a failed Unlock) must account for it.
//
// Through Lease: Refresh(ctx, shorter) whose ctx ends while the write is
// stuck returns ctx.Err(); Unlock then Stops the watchdog, the release
// fails, and a new watchdog starts from the returned deadline.
func TestStopCountsWriteInFlight(t *testing.T) {
	t.Parallel()
	const ttl, shorter = time.Second, 200 * time.Millisecond
	r := newRecorder()
	release := make(chan struct{})
	start := time.Now()
	w := r.watch(start, ttl, false, func(ctx context.Context, ttl time.Duration) error {
		r.renewCalled(ctx, ttl)
		<-release // a client whose socket timeout ignores the context
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := result(t, refreshAsync(w, ctx, shorter), time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh: %v, want context.DeadlineExceeded", err)
	}
	stopped := make(chan time.Time, 1)
	go func() { d, _ := w.Stop(); stopped <- d }()
	time.Sleep(20 * time.Millisecond)
	close(release) // the write completes: Redis applied the shorter TTL
	var deadline time.Time
	select {
	case deadline = <-stopped:
	case <-time.After(time.Second):
		t.Fatal("Stop did not return")
	}
	calls, _ := r.snapshot()
	if len(calls) != 1 {
		t.Fatalf("%d writes, want 1", len(calls))
	}
	if limit := watchdog.Deadline(calls[0].at, shorter); deadline.After(limit) {
		t.Errorf("Stop returned deadline %v after the write that set TTL %v; want at most %v",
			deadline.Sub(calls[0].at), shorter, limit.Sub(calls[0].at))
	}
}

// Refresh may be called from several goroutines (nothing in its doc says
// otherwise): every call must return.
func TestConcurrentRefreshesAllReturn(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	r := newRecorder()
	release := make(chan struct{})
	w := r.watch(time.Now(), ttl, false, func(ctx context.Context, ttl time.Duration) error {
		if r.renewCalled(ctx, ttl) == 1 {
			select { // the first write is slow
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	first := refreshAsync(w, context.Background(), ttl) // in flight
	time.Sleep(20 * time.Millisecond)
	second := refreshAsync(w, context.Background(), ttl) // queued
	time.Sleep(20 * time.Millisecond)
	third := refreshAsync(w, context.Background(), ttl) // queued too
	time.Sleep(20 * time.Millisecond)
	close(release)
	for i, c := range []<-chan error{first, second, third} {
		select {
		case err := <-c:
			if err != nil {
				t.Errorf("Refresh %d: %v", i+1, err)
			}
		case <-time.After(time.Second):
			t.Errorf("Refresh %d never returned", i+1)
		}
	}
	stopWithin(t, w, time.Second)
}

// StartRenewing renews, to the configured TTL, a lease whose first
// deadline was reckoned from a shorter hold: once, a third of the way to
// that deadline (not at once: a lease released sooner costs no renewal),
// Auto or not, and not again until a third of the TTL has passed. The
// lease then lives a whole TTL from the renewal, not to the first
// deadline.
func TestStartRenewing(t *testing.T) {
	t.Parallel()
	const ttl, held = 2 * time.Second, 300 * time.Millisecond
	for _, auto := range []bool{true, false} {
		t.Run(fmt.Sprintf("auto=%v", auto), func(t *testing.T) {
			t.Parallel()
			r := newRecorder()
			start := time.Now()
			first := watchdog.Deadline(start, held)
			cfg := watchdog.Config{TTL: ttl, Auto: auto, Renew: r.renews, Gone: isGone, OnLost: r.onLost}
			w := watchdog.StartRenewing(cfg, first)
			if at, lost := r.waitLost(held + 100*time.Millisecond); lost {
				t.Fatalf("OnLost ran %v after start, at the first deadline, though the lease was renewed", at.Sub(start))
			}
			calls, _ := r.snapshot()
			if len(calls) != 1 || calls[0].ttl != ttl {
				t.Fatalf("renewals %+v in the first %v; want one with TTL %v", calls, held+100*time.Millisecond, ttl)
			}
			if due := start.Add(first.Sub(start) / 3); calls[0].at.Before(due) {
				t.Errorf("first renewal %v after start; want it a third of the way to the deadline, %v", calls[0].at.Sub(start), due.Sub(start))
			}
			deadline := stopWithin(t, w, time.Second)
			if want := watchdog.Deadline(calls[0].at, ttl); deadline.Before(want.Add(-10 * time.Millisecond)) {
				t.Errorf("deadline %v after start; want %v, a TTL from the renewal", deadline.Sub(start), want.Sub(start))
			}
		})
	}
	t.Run("stopped before", func(t *testing.T) {
		t.Parallel()
		r := newRecorder()
		cfg := watchdog.Config{TTL: ttl, Auto: true, Renew: r.renews, Gone: isGone, OnLost: r.onLost}
		w := watchdog.StartRenewing(cfg, watchdog.Deadline(time.Now(), held))
		stopWithin(t, w, time.Second)
		time.Sleep(held)
		if calls, losses := r.snapshot(); len(calls) != 0 || len(losses) != 0 {
			t.Errorf("renewals %+v, losses %v for a lease stopped at once; want none", calls, losses)
		}
	})
}

// TestLossCauses checks the cause OnLost is given: the gone error, or at
// the deadline ErrUnconfirmed after a renewal failed or hung, ErrExpired
// when none was sent.
func TestLossCauses(t *testing.T) {
	t.Parallel()
	const ttl = 150 * time.Millisecond
	hang := func(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() }
	for _, c := range []struct {
		name  string
		auto  bool
		renew func(context.Context, time.Duration) error
		want  error
	}{
		{"gone", true, func(context.Context, time.Duration) error { return errGone }, errGone},
		{"failing", true, func(context.Context, time.Duration) error { return errors.New("connection refused") }, watchdog.ErrUnconfirmed},
		{"hanging", true, hang, watchdog.ErrUnconfirmed},
		{"not renewed", false, nil, watchdog.ErrExpired},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRecorder()
			w := r.watch(time.Now(), ttl, c.auto, c.renew)
			defer w.Stop()
			if _, ok := r.waitLost(2 * ttl); !ok {
				t.Fatalf("OnLost not called within %v", 2*ttl)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if !errors.Is(r.causes[0], c.want) {
				t.Errorf("OnLost cause %v, want %v", r.causes[0], c.want)
			}
		})
	}
}

// TestAutomaticContexts checks that automatic renewals, alone or in a
// batch, run under a context Automatic recognises, and a Refresh's do
// not.
func TestAutomaticContexts(t *testing.T) {
	t.Parallel()
	const ttl = 90 * time.Millisecond
	var mu sync.Mutex
	var auto, asked []bool
	renew := func(ctx context.Context, _ time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		if _, refresh := ctx.Value(refreshKey{}).(bool); refresh {
			asked = append(asked, watchdog.Automatic(ctx))
		} else {
			auto = append(auto, watchdog.Automatic(ctx))
		}
		return nil
	}
	b := batchFunc(func(ctx context.Context, rs []watchdog.Renewal) []error {
		mu.Lock()
		auto = append(auto, watchdog.Automatic(ctx))
		mu.Unlock()
		return make([]error, len(rs))
	})
	alone := watchdog.Start(watchdog.Config{TTL: ttl, Auto: true, Renew: renew, Gone: isGone, OnLost: func(error) {}}, watchdog.Deadline(time.Now(), ttl))
	defer alone.Stop()
	batched := watchdog.Start(watchdog.Config{TTL: ttl, Auto: true, Renew: renew, Gone: isGone, OnLost: func(error) {}, Batch: &b, Lease: 0}, watchdog.Deadline(time.Now(), ttl))
	defer batched.Stop()
	time.Sleep(ttl)
	if err := alone.Refresh(context.WithValue(context.Background(), refreshKey{}, true), ttl); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auto) < 2 || len(asked) != 1 {
		t.Fatalf("%d automatic renewals and %d refreshes; want at least 2 and 1", len(auto), len(asked))
	}
	if slices.Contains(auto, false) {
		t.Errorf("automatic renewals' contexts: Automatic = %v, want all true", auto)
	}
	if asked[0] {
		t.Error("a Refresh's context: Automatic = true, want false")
	}
}

type refreshKey struct{}

// batchFunc is a Batch made of a function.
type batchFunc func(ctx context.Context, rs []watchdog.Renewal) []error

func (f *batchFunc) Renew(ctx context.Context, rs []watchdog.Renewal) []error { return (*f)(ctx, rs) }

// TestLongerRefreshAfterFailedShorterKeepsLease: a Refresh that
// lengthens the TTL, succeeding after a renewal to a
// shorter TTL failed, counts its success with the shorter TTL (Redis may
// apply the failed write after it): the deadline is then near, so the
// next renewal must come before it. It must not be scheduled a third of
// the new, longer TTL later, past that deadline, losing a lease that
// Redis holds; and if that renewal fails once, it is retried before the
// (shorter) deadline, not a tenth of the longer TTL later.
func TestLongerRefreshAfterFailedShorterKeepsLease(t *testing.T) {
	t.Parallel()
	for name, failing := range map[string][]int32{
		"every renewal after succeeding":                 {1},
		"the first automatic renewal after failing once": {1, 3},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const ttl, shorter, longer = time.Second, 300 * time.Millisecond, 6 * time.Second
			r := newRecorder()
			var n atomic.Int32
			w := r.watch(time.Now(), ttl, true, func(ctx context.Context, ttl time.Duration) error {
				r.renewCalled(ctx, ttl)
				if slices.Contains(failing, n.Add(1)) { // the first: the shorter Refresh, its reply lost
					return errTransient
				}
				return nil
			})
			defer stopWithin(t, w, time.Second)
			if err := result(t, refreshAsync(w, context.Background(), shorter), time.Second); !errors.Is(err, errTransient) {
				t.Fatalf("Refresh(%v): %v, want Renew's error", shorter, err)
			}
			if err := result(t, refreshAsync(w, context.Background(), longer), time.Second); err != nil {
				t.Fatalf("Refresh(%v): %v", longer, err)
			}
			if at, lost := r.waitLost(2 * time.Second); lost {
				calls, _ := r.snapshot()
				t.Fatalf("lease declared lost %v after a successful Refresh to %v (renewals: %d)", at.Sub(calls[1].at), longer, len(calls))
			}
		})
	}
}
