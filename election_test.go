package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
)

// TestElectionLeader: Leader reports nobody, then the leader with its
// value, term and start; TryCampaign fails while led; Resign ends the
// term, and the next term is higher.
func TestElectionLeader(t *testing.T) {
	c, ctx := start(t)
	e := c.Election("jobs", dlock.WithMetadata("host-a"))
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	before := time.Now().Add(-time.Second)
	lead, err := e.TryCampaign(ctx, "10.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ld.Value != "10.0.0.1:8080" || ld.Term != lead.Fence() || ld.Since.Before(before) || ld.Since.After(time.Now().Add(time.Second)) {
		t.Errorf("Leader = %+v; want value 10.0.0.1:8080, term %d, since about now", ld, lead.Fence())
	}
	st := statusOf(t, e)
	if st.Kind != "election" || !st.Held || st.Value != "10.0.0.1:8080" || st.Metadata != "host-a" || st.Fence != lead.Fence() || st.TTL <= 0 {
		t.Errorf("Status = %+v; want the leader's value, metadata and term", st)
	}
	if _, err := c.Election("jobs").TryCampaign(ctx, "other"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryCampaign while led: %v, want ErrNotAcquired", err)
	}
	found, err := c.Inspect(ctx, "jobs")
	if err != nil || len(found) != 1 || found[0].Kind != "election" || found[0].Value != "10.0.0.1:8080" {
		t.Errorf("Inspect = %+v, %v; want the election and its leader's value", found, err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Errorf("Leader after Resign: %v, want ErrNoLeader", err)
	}
	next, err := e.TryCampaign(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence() <= lead.Fence() {
		t.Errorf("term %d after term %d", next.Fence(), lead.Fence())
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "" || ld.Term != next.Fence() {
		t.Errorf("Leader = %+v, %v; want the empty value in term %d", ld, err, next.Fence())
	}
	mustUnlock(t, next.Lease)
}

// TestElectionProclaim: Proclaim changes the value, not the term or its
// start, seen by Leader and by observers; once the leadership is gone it
// fails with ErrLost.
func TestElectionProclaim(t *testing.T) {
	srv, ctx := serve(t)
	var renewals atomic.Int64
	c, rdb, _ := newClient(t, srv, dlock.WithHooks(dlock.Hooks{
		RenewStart: func(ctx context.Context, _ dlock.LeaseInfo, _ bool) context.Context {
			renewals.Add(1)
			return ctx
		},
	}))
	const ttl = 900 * time.Millisecond // renewed every 150 to 300ms
	e := c.Election("svc", dlock.WithMetadata("keep me"), dlock.WithTTL(ttl))
	lead, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	oc, _, _ := newClient(t, srv)
	seen := oc.Election("svc").Observe(ctx)
	first := observed(t, seen)
	if first.Value != "v1" || first.Term != lead.Fence() {
		t.Fatalf("observed %+v first, want v1 in term %d", first, lead.Fence())
	}
	for _, v := range []string{"v2", "with spaces and\nnewlines", ""} {
		if err := lead.Proclaim(ctx, v); err != nil {
			t.Fatal(err)
		}
		ld, err := e.Leader(ctx)
		if err != nil || ld.Value != v || ld.Term != first.Term || !ld.Since.Equal(first.Since) {
			t.Errorf("Leader after Proclaim(%q) = %+v, %v; want the same term and start as %+v", v, ld, err, first)
		}
		if got := observed(t, seen); got != ld {
			t.Errorf("observed %+v after Proclaim(%q), want %+v", got, v, ld)
		}
	}
	if st := statusOf(t, e); st.Metadata != "keep me" || st.TTL <= 0 {
		t.Errorf("Status after Proclaim = %+v; want the metadata and TTL kept", st)
	}
	// The leadership disappears from Redis (an operator, a flush).
	if err := rdb.Del(ctx, keys.For(dlock.DefaultPrefix, keys.KindElect, "svc").Key()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lead.Proclaim(ctx, "v3"); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Proclaim after the leadership was removed: %v, want ErrLost", err)
	}
	select {
	case <-lead.Lost():
	default:
		t.Error("Lost() not closed by a Proclaim that found the leadership gone")
	}
	// Nothing is left to renew.
	before := renewals.Load()
	time.Sleep(ttl)
	if n := renewals.Load() - before; n != 0 {
		t.Errorf("%d renewals of a leadership a Proclaim found gone; want none", n)
	}

	again, err := e.TryCampaign(ctx, "v4")
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := again.Proclaim(ctx, "v5"); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Proclaim after Resign: %v, want ErrLost", err)
	}
}

// TestElectionObserve: observers, sharing their client's subscription
// and one read per change, see every change (a term, a value, a
// handover, a term that ends with nobody next) promptly, woken by Redis:
// no command is sent while nothing changes. One observer leaving leaves
// the others be; one that joins late gets the current leader at once.
func TestElectionObserve(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	oc, ordb, cnt := newClient(t, srv)
	e := c.Election("obs", dlock.WithTTL(30*time.Second))
	var seen []<-chan dlock.Leader
	for range 3 {
		seen = append(seen, oc.Election("obs").Observe(ctx))
	}
	all := func(want func(dlock.Leader) bool, what string) dlock.Leader {
		t.Helper()
		var got dlock.Leader
		for i, ch := range seen {
			got = observed(t, ch)
			if !want(got) {
				t.Fatalf("observer %d saw %+v, want %s", i, got, what)
			}
		}
		return got
	}
	// Nobody leads: nothing is sent.
	for i, ch := range seen {
		select {
		case ld := <-ch:
			t.Fatalf("observer %d saw %+v while nobody leads", i, ld)
		case <-time.After(200 * time.Millisecond):
		}
	}
	channel := keys.For(dlock.DefaultPrefix, keys.KindElect, "obs").Channel()
	if n, err := ordb.PubSubNumSub(ctx, channel).Result(); err != nil || n[channel] != 1 {
		t.Errorf("subscriptions to %s: %v, %v; want the 3 observers' client's one", channel, n, err)
	}

	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got := all(func(l dlock.Leader) bool { return l.Value == "a" && l.Term == a.Fence() }, "a's term")

	// Waiting costs the observers nothing.
	idle := cnt.Load()
	time.Sleep(1500 * time.Millisecond)
	if n := cnt.Load() - idle; n != 0 {
		t.Errorf("observers sent %d commands while nothing changed: %s", n, cnt)
	}

	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	all(func(l dlock.Leader) bool { return l.Value == "a2" && l.Term == got.Term }, "a2 in the same term")
	if n := cnt.Load() - idle; n != 1 {
		t.Errorf("3 observers sent %d commands for one change, want 1 read: %s", n, cnt)
	}

	// One leaves; one joins late and is told the leader at once.
	lctx, leave := context.WithCancel(ctx)
	late := oc.Election("obs").Observe(lctx)
	if ld := observed(t, late); ld.Value != "a2" {
		t.Errorf("a late observer saw %+v first, want a2", ld)
	}
	leave()
	closes(t, late, "after its ctx ended")

	// A campaigner waits; a's Resign hands over at once, and observers
	// see the new term with no gap.
	bc, _, _ := newClient(t, srv)
	be := bc.Election("obs")
	bl := campaignAsync(t, ctx, be, "b")
	waitQueued(t, e, 1)
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-bl
	if b == nil {
		t.FailNow()
	}
	all(func(l dlock.Leader) bool { return l.Value == "b" && l.Term == b.Fence() && b.Fence() > a.Fence() }, "b's term, straight after a's")

	// The term ends with nobody next: the zero Leader.
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	all(func(l dlock.Leader) bool { return l == dlock.Leader{} }, "nobody")
}

// TestElectionObserveNeverGoesBack: a slow observer skips states but
// sees terms only rise, and ends on the latest state.
func TestElectionObserveNeverGoesBack(t *testing.T) {
	c, ctx := start(t)
	e := c.Election("churn")
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := e.Observe(octx)
	done := make(chan uint64)
	go func() {
		var last uint64
		for i := range 30 {
			l, err := e.TryCampaign(ctx, fmt.Sprint("v", i))
			if err != nil {
				t.Error(err)
				break
			}
			time.Sleep(3 * time.Millisecond)
			_ = l.Proclaim(ctx, fmt.Sprint("w", i))
			time.Sleep(3 * time.Millisecond)
			last = l.Fence()
			if i < 29 {
				_ = l.Resign(ctx)
				time.Sleep(3 * time.Millisecond)
			}
		}
		done <- last
	}()
	var got []dlock.Leader
	var last uint64
	for {
		select {
		case ld := <-seen:
			got = append(got, ld)
			time.Sleep(10 * time.Millisecond) // a slow receiver
			continue
		case last = <-done:
		}
		break
	}
	deadline := time.After(5 * time.Second)
	for len(got) == 0 || got[len(got)-1].Term != last || got[len(got)-1].Value != "w29" {
		select {
		case ld := <-seen:
			got = append(got, ld)
		case <-deadline:
			t.Fatalf("the observer's last state is not term %d, w29: saw %+v", last, got)
		}
	}
	var top uint64
	for i, ld := range got {
		if ld.Term != 0 && ld.Term < top {
			t.Fatalf("state %d, term %d, after term %d: %+v", i, ld.Term, top, got)
		}
		top = max(top, ld.Term)
	}
	if len(got) >= 90 {
		t.Errorf("a slow receiver got all %d states; want the ones in between skipped", len(got))
	}
	t.Logf("%d states seen of 90", len(got))
}

// TestElectionObserveEnds: Observe's channel closes when ctx ends, when
// the client closes, and at once on a client that cannot hold elections.
func TestElectionObserveEnds(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	octx, cancel := context.WithCancel(ctx)
	seen := c.Election("end").Observe(octx)
	cancel()
	closes(t, seen, "after ctx ended")

	c2, _, _ := newClient(t, srv)
	seen = c2.Election("end").Observe(ctx)
	time.Sleep(100 * time.Millisecond) // subscribed, most likely
	c2.Close()
	closes(t, seen, "after the client closed")

	closes(t, c.Election("").Observe(ctx), "for a bad name")
	rl := dlock.NewRedlock([]redis.UniversalClient{srv.Client(t)})
	defer rl.Close()
	closes(t, rl.Election("end").Observe(ctx), "on a Redlock client")
	if _, err := rl.Election("end").Campaign(ctx, "v"); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Campaign on a Redlock client: %v, want ErrUnsupported", err)
	}
	if _, err := rl.Election("end").Leader(ctx); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("Leader on a Redlock client: %v, want ErrUnsupported", err)
	}
	if _, err := c.Election("").Leader(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("Leader of a bad name: %v, want ErrInvalid", err)
	}
}

// TestElectionCrashedLeader: a leader process killed without a word is
// replaced by the next campaigner once its TTL has run out, and
// observers see it go.
func TestElectionCrashedLeader(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	e := c.Election("crash")
	seen := e.Observe(ctx)
	p := startHelper(t, srv, "elect", "crash")
	crashed := observed(t, seen)
	if crashed.Value != "doomed" {
		t.Fatalf("observed %+v, want the helper leading", crashed)
	}
	got := campaignAsync(t, ctx, e, "heir")
	waitQueued(t, e, 1)
	if err := p.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	heir := <-got
	if heir == nil {
		t.FailNow()
	}
	if d := time.Since(killed); d > helperTTL+2*time.Second {
		t.Errorf("the heir led %v after the leader died; its TTL is %v", d, helperTTL)
	}
	for ld := observed(t, seen); ld.Term != heir.Fence(); ld = observed(t, seen) {
		if ld.Term != 0 {
			t.Fatalf("observed %+v before the heir's term %d", ld, heir.Fence())
		}
	}
	if heir.Fence() <= crashed.Term {
		t.Errorf("the heir's term %d is not above the crashed leader's %d", heir.Fence(), crashed.Term)
	}
	mustUnlock(t, heir.Lease)
}

// helperTTL is the TTL of the leadership the "elect" helper takes.
const helperTTL = time.Second

// electHelper campaigns in the election DLOCK_TEST_NAME with the value
// "doomed" and leads until killed.
func electHelper() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	c := dlock.New(rdb)
	_, err := c.Election(os.Getenv("DLOCK_TEST_NAME"), dlock.WithTTL(helperTTL)).Campaign(context.Background(), "doomed")
	if err != nil {
		fmt.Fprintln(os.Stderr, "electHelper:", err)
		return 1
	}
	select {}
}

// campaignAsync campaigns in e with value in a goroutine (see async).
func campaignAsync(t *testing.T, ctx context.Context, e *dlock.Election, value string) <-chan *dlock.Leadership {
	return async(t, ctx, func(ctx context.Context) (*dlock.Leadership, error) { return e.Campaign(ctx, value) })
}

// observed returns what ch sends within 5s, or fails t.
func observed(t *testing.T, ch <-chan dlock.Leader) dlock.Leader {
	t.Helper()
	select {
	case ld, ok := <-ch:
		if !ok {
			t.Fatal("the observer's channel closed")
		}
		return ld
	case <-time.After(5 * time.Second):
		t.Fatal("nothing observed in 5s")
	}
	return dlock.Leader{}
}

// closes fails t unless ch closes within 2s (values before it are
// dropped).
func closes(t *testing.T, ch <-chan dlock.Leader, when string) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("Observe's channel still open %s", when)
		}
	}
}

// TestElectionObserveSoonerEnd: a leader whose lease's end comes nearer
// (a shorter Refresh, the first renewal after a hand-over with a TTL
// below the queue's liveness) announces it, so observers see it go when
// it runs out, not when it would have.
func TestElectionObserveSoonerEnd(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	oc, _, _ := newClient(t, srv)
	seen := oc.Election("sooner").Observe(ctx)

	// A Refresh to 200ms, then no renewal.
	l, err := c.Election("sooner", dlock.WithTTL(10*time.Second), dlock.WithAutoRefresh(false)).TryCampaign(ctx, "short")
	if err != nil {
		t.Fatal(err)
	}
	if ld := observed(t, seen); ld.Value != "short" {
		t.Fatalf("observed %+v", ld)
	}
	if err := l.Refresh(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	lost := time.Now()
	if ld := observed(t, seen); ld.Term != 0 {
		t.Fatalf("observed %+v, want nobody", ld)
	}
	if d := time.Since(lost); d > time.Second {
		t.Errorf("observers saw the leader go %v after its 200ms lease ran out", d)
	}

	// A hand-over to a campaigner with a 1s TTL, which then dies.
	a, err := c.Election("sooner", dlock.WithTTL(30*time.Second)).TryCampaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if ld := observed(t, seen); ld.Value != "a" {
		t.Fatalf("observed %+v", ld)
	}
	p := startHelper(t, srv, "elect", "sooner")
	waitQueued(t, c.Election("sooner"), 1)
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ld := observed(t, seen); ld.Value != "doomed" {
		t.Fatalf("observed %+v, want the helper leading", ld)
	}
	err = eventually(ctx, 5*time.Second, func() error {
		if st := statusOf(t, c.Election("sooner")); st.TTL > helperTTL {
			return fmt.Errorf("TTL %v: not renewed yet", st.TTL)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if ld := observed(t, seen); ld.Term != 0 {
		t.Fatalf("observed %+v, want nobody", ld)
	}
	if d := time.Since(killed); d > helperTTL+500*time.Millisecond {
		t.Errorf("observers saw the dead leader go %v after the kill; its TTL is %v", d, helperTTL)
	}
}

// TestElectionObserveReconnects: the subscription connection is killed
// around each change; observers still see every change, with no timer
// to save them (30s TTL).
func TestElectionObserveReconnects(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	oc, _, _ := newClient(t, srv)
	admin := srv.Client(t)
	seen := oc.Election("rc").Observe(ctx)
	kill := func() {
		t.Helper()
		if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		kill()
		l, err := c.Election("rc", dlock.WithTTL(30*time.Second)).TryCampaign(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if ld := observed(t, seen); ld.Term != l.Fence() {
			t.Fatalf("observed %+v, want term %d", ld, l.Fence())
		}
		kill()
		mustUnlock(t, l.Lease)
		if ld := observed(t, seen); ld.Term != 0 {
			t.Fatalf("observed %+v, want nobody", ld)
		}
	}
}

// TestElectionObserversBesideCampaigners: observers on the campaigners'
// own client take no wake-up meant for a campaigner: every hand-over
// goes through at once.
func TestElectionObserversBesideCampaigners(t *testing.T) {
	c, ctx := start(t)
	e := c.Election("share", dlock.WithTTL(30*time.Second))
	for range 5 {
		e.Observe(ctx)
	}
	l, err := e.Campaign(ctx, "0")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 20; i++ {
		next := campaignAsync(t, ctx, e, fmt.Sprint(i))
		waitQueued(t, e, 1)
		start := time.Now()
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if l = <-next; l == nil {
			t.FailNow()
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("hand-over %d took %v", i, d)
		}
	}
	mustUnlock(t, l.Lease)
}

// TestLeadershipZero: a Leadership no Campaign returned is ErrInvalid,
// not a panic.
func TestLeadershipZero(t *testing.T) {
	var zero dlock.Leadership
	var none *dlock.Leadership
	ctx := t.Context()
	for _, l := range []*dlock.Leadership{&zero, none} {
		_, heldErr := l.Held(ctx)
		// Unlock, Refresh and Held are Lease's: a nil Leadership (a failed
		// Campaign's, deferred unchecked) must not panic in them.
		for _, err := range []error{l.Resign(ctx), l.Proclaim(ctx, "v"), l.Unlock(ctx), l.Refresh(ctx, time.Second), heldErr} {
			if !errors.Is(err, dlock.ErrInvalid) {
				t.Errorf("got %v, want ErrInvalid", err)
			}
		}
	}
}

// busyFor keeps srv answering BUSY for d (see redistest.Server.Busy),
// then waits until Redis answers again.
func busyFor(t *testing.T, srv *redistest.Server, d time.Duration) {
	t.Helper()
	end := srv.Busy(t)
	time.Sleep(d)
	end()
}

// TestObserveSurvivesBusy: a script that runs long for a while (BUSY
// replies) passes by itself; observers keep following, and see the
// leader's lease run out meanwhile, instead of having their channel
// closed for good.
func TestObserveSurvivesBusy(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	oc, _, _ := newClient(t, srv)
	seen := oc.Election("busy").Observe(ctx)
	l, err := c.Election("busy", dlock.WithTTL(800*time.Millisecond), dlock.WithAutoRefresh(false)).TryCampaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if ld := observed(t, seen); ld.Term != l.Fence() {
		t.Fatalf("observed %+v, want term %d", ld, l.Fence())
	}
	busyFor(t, srv, 1500*time.Millisecond) // past the lease's end, when the follower reads again
	select {
	case ld, ok := <-seen:
		if !ok {
			t.Fatal("Observe's channel closed by a script that ran long for 1.5s")
		}
		if ld.Term != 0 {
			t.Fatalf("observed %+v, want nobody", ld)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing observed after the leader's lease ran out")
	}
}

// TestCampaignSurvivesBusy: a campaigner whose heartbeats and tries meet
// BUSY for a while keeps waiting, and leads when the leader resigns.
func TestCampaignSurvivesBusy(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	c2, _, _ := newClient(t, srv)
	l, err := c.Election("busy").TryCampaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		nl, err := c2.Election("busy").Campaign(ctx, "w")
		if err == nil {
			err = nl.Resign(ctx)
		}
		errc <- err
	}()
	waitQueued(t, c.Election("busy"), 1)
	busyFor(t, srv, 2500*time.Millisecond) // two heartbeats or more meet BUSY
	select {
	case err := <-errc:
		t.Fatalf("Campaign returned while the leader still leads: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestElectStallCountsNoHolder: WithStallTimeout promises to give
// up only once the SAME holder has kept the lock for d while the caller
// waited. Here the leader's lease runs out 200ms into the wait and nobody
// holds the term afterwards (a dead campaigner is first in line and is
// skipped within 3s); the campaigner must not give up with a stall error
// claiming the old leader kept the term for the whole stall timeout.
func TestElectStallCountsNoHolder(t *testing.T) {
	srv, ctx := serve(t)
	c, _, _ := newClient(t, srv)
	nc, _, _ := newClient(t, srv)
	const name = "stall-free"
	a, err := c.Election(name, dlock.WithTTL(30*time.Second), dlock.WithAutoRefresh(false)).TryCampaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	dead := startHelper(t, srv, "elect", name) // queues behind a, then dies
	waitQueued(t, c.Election(name), 1)
	const stall = 1500 * time.Millisecond
	type result struct {
		l   *dlock.Leadership
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	begun := time.Now()
	go func() {
		l, err := nc.Election(name, dlock.WithTTL(30*time.Second), dlock.WithStallTimeout(stall)).Campaign(ctx, "n")
		got <- result{l, err, time.Now()}
	}()
	waitQueued(t, c.Election(name), 2)
	if err := dead.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// a's term ends: its lease runs out 200ms from now, with no renewal.
	if err := a.Refresh(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	err = eventually(ctx, 2*time.Second, func() error {
		if st := statusOf(t, c.Election(name)); st.Held {
			return fmt.Errorf("still held: %+v", st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Campaign gave up %v after it began (a's term ended %v after it began, nobody held it since): %v",
				r.at.Sub(begun).Round(time.Millisecond), ended.Sub(begun).Round(time.Millisecond), r.err)
		}
		mustUnlock(t, r.l.Lease)
	case <-time.After(6 * time.Second):
		t.Fatal("the campaigner neither led nor gave up")
	}
}

// TestObserveEndsAtCloseWhileRedisSilent: Observe's channel
// closes when the Client is closed, "whatever the go-redis client's
// options" (README, Deadlines). Here the follower is reading the leader
// from a Redis that does not answer (paused), on a go-redis client with no
// read timeout, when the Client is closed.
func TestObserveEndsAtCloseWhileRedisSilent(t *testing.T) {
	srv, ctx := serve(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.ReadTimeout = -1 })
	oc := dlock.New(rdb)
	t.Cleanup(func() { oc.Close() }) // after pausedUntilEnd's resume
	lc, _, _ := newClient(t, srv)
	seen := oc.Election("silent").Observe(ctx)
	l, err := lc.Election("silent", dlock.WithTTL(500*time.Millisecond), dlock.WithAutoRefresh(false)).TryCampaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if ld := observed(t, seen); ld.Term != l.Fence() {
		t.Fatalf("observed %+v", ld)
	}
	resume := pausedUntilEnd(t, srv)
	time.Sleep(time.Second) // the lease's end is due: the follower reads again, and Redis does not answer
	closed := make(chan error, 1)
	go func() { closed <- oc.Close() }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-seen:
			if ok {
				continue
			}
			return
		case <-deadline:
			select {
			case err := <-closed:
				t.Logf("Close returned: %v", err)
			default:
				t.Log("Close has not returned")
			}
			resume()
			t.Fatal("Observe's channel still open 10s after the Client was closed (Redis silent)")
		}
	}
}

// TestCampaignEndsAtCloseWhileRedisSilent: Close makes
// "waiters still blocked in Lock return an error" (Client.Close). Here
// the campaigner is trying (its leader's lease ran out) against a Redis
// that does not answer, on a go-redis client with no read timeout, when
// the Client is closed; its ctx never ends.
func TestCampaignEndsAtCloseWhileRedisSilent(t *testing.T) {
	srv, ctx := serve(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.ReadTimeout = -1 })
	cc := dlock.New(rdb)
	t.Cleanup(func() { cc.Close() }) // after pausedUntilEnd's resume
	lc, _, _ := newClient(t, srv)
	_, err := lc.Election("silent-c", dlock.WithTTL(500*time.Millisecond), dlock.WithAutoRefresh(false)).TryCampaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := cc.Election("silent-c").Campaign(context.Background(), "w")
		got <- err
	}()
	waitQueued(t, lc.Election("silent-c"), 1)
	resume := pausedUntilEnd(t, srv)
	time.Sleep(time.Second) // l's lease ran out: the campaigner tries, and Redis does not answer
	closed := make(chan error, 1)
	go func() { closed <- cc.Close() }()
	select {
	case err := <-got:
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("Campaign on a client closed while Redis was silent = %v, want ErrInvalid", err)
		}
	case <-time.After(10 * time.Second):
		resume()
		t.Fatal("Campaign still blocked 10s after the Client was closed (Redis silent)")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		resume()
		t.Fatal("Close still blocked 10s after Campaign returned (Redis silent)")
	}
}

// pausedUntilEnd pauses srv (SIGSTOP) until the test ends, or until the
// function it returns resumes it first.
func pausedUntilEnd(t *testing.T, srv *redistest.Server) func() {
	srv.Pause(t)
	var once sync.Once
	resume := func() { once.Do(func() { srv.Resume(t) }) }
	t.Cleanup(resume)
	return resume
}
