package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
)

// TestCluster runs the Mutex on a 3+3 Redis Cluster: locks whose names
// hash to every master, exclusion under contention, and a waiter woken by
// a release through sharded pub/sub rather than by the holder's expiry.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()

	for kind, mk := range lockers {
		t.Run("exclusion/"+kind, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "held")
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var mu sync.Mutex
			var fences []uint64
			errs := make([]error, 8)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = contend(cctx, mk(c, "cluster-shared"), marker, time.Millisecond, func(f uint64) {
						mu.Lock()
						fences = append(fences, f)
						mu.Unlock()
					})
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if len(fences) < 8 {
				t.Fatalf("only %d acquisitions", len(fences))
			}
			checkIncreasing(t, fences)
		})
	}

	t.Run("semaphore permits", func(t *testing.T) { semContention(t, ctx, c, "cluster-sem") })

	t.Run("set members", func(t *testing.T) {
		// A set whose keys share one slot: any member and named ones,
		// taken by goroutines of two clients, each member's holders
		// counted outside Redis.
		members := []string{"dev-a", "dev-b"}
		other := dlock.New(cl.Client(t))
		t.Cleanup(func() { other.Close() })
		if err := c.MutexSet("cluster-set").Add(ctx, members...); err != nil {
			t.Fatal(err)
		}
		u := contendSetAll(t, ctx, 2*time.Second, 6, func(i int) func(context.Context) (*dlock.Lease, error) {
			s := []*dlock.Client{c, other}[i%2].MutexSet("cluster-set", dlock.WithTTL(5*time.Second))
			if i%3 == 2 {
				return func(ctx context.Context) (*dlock.Lease, error) { return s.AcquireMember(ctx, members[i%2]) }
			}
			return s.Acquire
		})
		checkSetUse(t, u, members)
	})

	t.Run("set in the older layout", func(t *testing.T) {
		// Converted on a Cluster too, where its scripts declare the
		// older layout's keys (MutexSet.layoutKeys).
		key := olderSetAtRest(t, rdb, "cluster-older")
		s := c.MutexSet("cluster-older")
		l, err := s.TryAcquire(ctx)
		if err != nil || l.Name() != "c" || l.Fence() <= 200 {
			t.Fatalf("TryAcquire on an older set at rest = %v; want c, above fence 200", err)
		}
		if n := rdb.Exists(ctx, key.Part("free"), key.Part("fences")).Val(); n != 0 {
			t.Errorf("%d keys of the older layout left", n)
		}
		mustUnlock(t, l)
	})

	t.Run("election observed", func(t *testing.T) {
		e := c.Election("cluster-elect")
		seen := e.Observe(ctx)
		lead, err := e.Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if ld := observed(t, seen); ld.Value != "a" || ld.Term != lead.Fence() {
			t.Errorf("observed %+v, want a in term %d", ld, lead.Fence())
		}
		if err := lead.Proclaim(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if ld := observed(t, seen); ld.Value != "b" || ld.Term != lead.Fence() {
			t.Errorf("observed %+v, want b in term %d", ld, lead.Fence())
		}
		if err := lead.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if ld := observed(t, seen); ld != (dlock.Leader{}) {
			t.Errorf("observed %+v after Resign, want nobody", ld)
		}
	})

	t.Run("rw readers and writers", func(t *testing.T) {
		m := &rwMarkers{dir: t.TempDir()}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var mu sync.Mutex
		var events []rwEvent
		err := rwMix(cctx, c, "cluster-rw", m, 4, 1, func(e rwEvent) { mu.Lock(); events = append(events, e); mu.Unlock() })
		if err != nil {
			t.Fatal(err)
		}
		reads, writes := checkRWFences(t, events)
		if reads < 4 || writes < 1 || m.most.Load() < 2 {
			t.Fatalf("%d reads, %d writes, up to %d readers at once", reads, writes, m.most.Load())
		}

		// Both wake channels, long before the 30s leases would end: a
		// writer's release wakes a reader, a reader's release a writer
		// (PreferReaders: the writer has no heartbeat to wake it).
		rw := c.RWMutex("cluster-rw-wake", dlock.WithTTL(30*time.Second), dlock.WithRWMode(dlock.PreferReaders))
		type lockFunc func(context.Context) (*dlock.Lease, error)
		for _, turn := range [][2]lockFunc{{rw.Lock, rw.RLock}, {rw.RLock, rw.Lock}} {
			h, err := turn[0](ctx)
			if err != nil {
				t.Fatal(err)
			}
			handOff(t, ctx, h, turn[1], 100*time.Millisecond)
		}
	})

	t.Run("scripts declare every key", func(t *testing.T) {
		// A slot on the move makes Redis refuse a script whose declared
		// key is missing, rather than let it read that key as gone (see
		// TestQueuedScriptsSentTheirOwnerKeyAlone for a single Redis).
		d := &hook{}
		drdb := cl.Client(t)
		drdb.AddHook(d)
		dc := dlock.New(drdb)
		defer dc.Close()
		m := dc.Mutex("cluster-declared")
		mustUnlock(t, mustTake(t, ctx, m.TryLock)) // loads the scripts
		d.evalKeys()
		mustUnlock(t, mustTake(t, ctx, m.TryLock))
		sent := d.evalKeys()
		if len(sent) != 2 {
			t.Fatalf("%d scripts sent, want a try and a release", len(sent))
		}
		for i, n := range sent {
			if n != 5 {
				t.Errorf("script %d sent %d keys, want all five of a Mutex", i+1, n)
			}
		}
	})

	t.Run("wake on every shard", func(t *testing.T) {
		// 12 names spread over the 3 masters; each waiter must be woken by
		// its release long before the holder's 30s lease would end.
		for i := range 12 {
			name := fmt.Sprintf("cluster-wake-%d", i)
			h := mustTake(t, ctx, c.Mutex(name, dlock.WithTTL(30*time.Second)).Lock)
			handOff(t, ctx, h, c.Mutex(name).Lock, 50*time.Millisecond)
		}
	})
}

// TestClusterFailoverContention kills the master that serves a Mutex and a
// FairMutex while workers contend for each, so that its replica takes
// over: no Lock hangs, the workers all get the lock again within a bounded
// time, fences go on rising, and leases overlap only if one was taken
// during the failover (see failoverRun.check).
func TestClusterFailoverContention(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	// Both locks on one master, so one kill fails over both.
	admin := cl.Client(t)
	mutexName := "cluster-failover-mutex"
	victim := masterOf(t, cl, admin, mutexName)
	victimAddr := victim.Addr()
	fairName := ""
	for i := 0; fairName == ""; i++ {
		if n := fmt.Sprintf("cluster-failover-fair-%d", i); masterOf(t, cl, admin, n) == victim {
			fairName = n
		}
	}

	const workers = 4
	clients := make([]*dlock.Client, 2)
	for i := range clients {
		clients[i] = dlock.New(cl.Client(t))
		t.Cleanup(func() { clients[i].Close() })
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runs := map[string]*failoverRun{
		"mutex": contendAcross(runCtx, workers, func(i int) dlock.Locker {
			return clients[i%2].Mutex(mutexName, dlock.WithTTL(2*time.Second))
		}, 5*time.Millisecond),
		"fair": contendAcross(runCtx, workers, func(i int) dlock.Locker {
			return clients[i%2].FairMutex(fairName, dlock.WithTTL(2*time.Second))
		}, 5*time.Millisecond),
	}

	time.Sleep(time.Second)
	w0 := time.Now()
	victim.Kill(t)
	cl.WaitHealthy(t)
	w1 := time.Now()
	t.Logf("master %s killed; cluster healthy again after %v", victimAddr, w1.Sub(w0))
	time.Sleep(afterFailover)
	stop()
	for kind, run := range runs {
		t.Run(kind, func(t *testing.T) {
			run.wait(t)
			run.check(t, workers, w0, w1)
		})
	}
}

// TestClusterPausedMasterSparesOtherLeases: a client holds a lease on
// each of two masters, renewed together; one master is paused (SIGSTOP).
// Its lease is lost at its TTL, but the other's renewals go on: go-redis
// answers a Cluster's pipeline once every node has, and a batch that
// waited for the paused one (until the 3s read timeout) lost the lease on
// the healthy master with it.
func TestClusterPausedMasterSparesOtherLeases(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx := t.Context()
	admin := cl.Client(t)
	pausedName, keptName, victim := onTwoMasters(t, cl, admin)
	c := dlock.New(cl.Client(t))
	defer c.Close()
	ttl := 3 * time.Second // under go-redis' 3s read timeout plus a renewal's TTL/3, as the test needs
	paused := mustTake(t, ctx, c.Mutex(pausedName, dlock.WithTTL(ttl)).Lock)
	kept := mustTake(t, ctx, c.Mutex(keptName, dlock.WithTTL(ttl)).Lock)
	time.Sleep(ttl / 2) // renewed together once
	victim.Pause(t)
	defer victim.Resume(t)
	receive(t, paused.Lost(), "the Lost() of the lease on the paused master")
	time.Sleep(2 * ttl)
	select {
	case <-kept.Lost():
		t.Fatal("the lease on a healthy master was lost with the paused master's")
	default:
	}
	if held, err := kept.Held(ctx); !held || err != nil {
		t.Fatalf("Held of the lease on a healthy master: %v, %v", held, err)
	}
	if err := kept.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// onTwoMasters returns the names of two locks whose keys lie on two
// different masters of cl, and the first one's master.
func onTwoMasters(t *testing.T, cl *redistest.Cluster, admin *redis.ClusterClient) (string, string, *redistest.Server) {
	t.Helper()
	first := masterOf(t, cl, admin, "paused-0")
	for i := 1; ; i++ {
		if n := fmt.Sprintf("kept-%d", i); masterOf(t, cl, admin, n) != first {
			return "paused-0", n, first
		}
	}
}

// masterOf returns the master of cl whose slots hold the keys of the lock
// called name, asking admin.
func masterOf(t *testing.T, cl *redistest.Cluster, admin *redis.ClusterClient, name string) *redistest.Server {
	t.Helper()
	node, err := admin.MasterForKey(t.Context(), "{"+name+"}")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cl.Nodes() {
		if s.Addr() == node.Options().Addr {
			return s
		}
	}
	t.Fatalf("no node of the cluster at %s", node.Options().Addr)
	return nil
}

// TestClusterPausedMasterSparesOtherWaiters: while one master is paused,
// the heartbeats of waiters on the others still come back each second
// (one batch part per master), so a release on a healthy master hands its
// lock over in one message: the waiter takes it with no try of its own.
// (With one batch for all masters, every reply waited for the paused one
// and was dropped; the waiter's last refusal grew too old to date a
// hand-over by, and it had to try.)
func TestClusterPausedMasterSparesOtherWaiters(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	admin := cl.Client(t)
	pausedName, keptName, victim := onTwoMasters(t, cl, admin)
	noFailover(t, admin)
	waiterSpared(t, cl, pausedName, keptName, func() *redistest.Server { return victim })
}

// waiterSpared has a client wait for the Mutexes troubled and kept, both
// held by another client, then calls trouble, which returns the master
// to pause, for longer than a hand-over is dated by the last refusal
// (3s); it then releases kept, and fails t unless the lock is handed to
// its waiter in one message, with no try of its own: its heartbeats came
// back all along.
func waiterSpared(t *testing.T, cl *redistest.Cluster, troubled, kept string, trouble func() *redistest.Server) {
	t.Helper()
	ctx := t.Context()
	holders := dlock.New(cl.Client(t))
	defer holders.Close()
	mustTake(t, ctx, holders.Mutex(troubled, dlock.WithNoExpiry()).Lock)
	keptLease := mustTake(t, ctx, holders.Mutex(kept, dlock.WithNoExpiry()).Lock)
	cnt := &hook{mark: "waiting"}
	rdb := cl.Client(t)
	rdb.AddHook(cnt)
	c := dlock.New(rdb)
	defer c.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 2)
	for _, name := range []string{troubled, kept} {
		go func() {
			l, err := c.Mutex(name, dlock.WithMetadata("waiting")).Lock(wctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
	}
	time.Sleep(1500 * time.Millisecond) // both queued, beating
	paused := trouble()
	paused.Pause(t)
	defer paused.Resume(t)
	time.Sleep(4 * time.Second) // longer than a hand-over is dated by the last refusal (3s)
	tries := cnt.marked.Load()
	if err := keptLease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter on a master that answered did not get the lock released to it")
	}
	if n := cnt.marked.Load() - tries; n > 0 {
		t.Errorf("the waiter on a master that answered sent %d tries for a hand-over while another master was paused; want none", n)
	}
}

// TestClusterLeaseBesideASlotMovingToAPausedMaster: a client holds two
// leases on one master, in two slots, renewed together in one script
// run. The first one's slot is on its way to another master (its keys
// moved, the move not finished), and that master is paused, or killed.
// go-redis follows the ASK redirection for the moved key with the whole
// run, or sends the moved lease's renewal alone to the paused master in
// the same pipeline as the other's reply: the lease on the master that
// answers all along was held up with it, batch after batch, and lost. A
// lease whose renewal failed goes in a part of its own (see byMaster).
func TestClusterLeaseBesideASlotMovingToAPausedMaster(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("killed=%v", kill), func(t *testing.T) {
			t.Parallel()
			cl := redistest.StartCluster(t)
			ctx := t.Context()
			admin := cl.Client(t)
			noFailover(t, admin)
			movingName, keptName := inTwoSlotsOfOneMaster(t, cl, admin)
			c := dlock.New(cl.Client(t))
			defer c.Close()
			ttl := 2 * time.Second
			mustTake(t, ctx, c.Mutex(movingName, dlock.WithTTL(ttl)).Lock)
			kept := mustTake(t, ctx, c.Mutex(keptName, dlock.WithTTL(ttl)).Lock)
			target := moveKeysOf(t, cl, movingName)
			if kill {
				target.Kill(t)
			} else {
				target.Pause(t)
				defer target.Resume(t)
			}
			time.Sleep(2 * ttl)
			if isClosed(kept.Lost()) {
				t.Error("Lost() of the lease on the master that answered closed: its renewals went with the moving lease's")
			}
			if held, err := kept.Held(ctx); !held || err != nil {
				t.Errorf("Held of the lease on the master that answered: %v, %v; want true", held, err)
			}
		})
	}
}

// TestClusterWaiterBesideASlotMovingToAPausedMaster: the waiters' side of
// TestClusterLeaseBesideASlotMovingToAPausedMaster. Two waiters of one
// client queue for locks of one master, in two slots; the first one's
// slot is on its way to another master, which is paused. The other's
// heartbeats must still come back each second (a heartbeat that failed
// goes in a part of its own), so that a release hands its lock over in
// one message, with no try of its own.
func TestClusterWaiterBesideASlotMovingToAPausedMaster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	admin := cl.Client(t)
	noFailover(t, admin)
	movingName, keptName := inTwoSlotsOfOneMaster(t, cl, admin)
	waiterSpared(t, cl, movingName, keptName, func() *redistest.Server { return moveKeysOf(t, cl, movingName) })
}

// noFailover keeps every master of the cluster admin reaches its slots'
// master, and serving, while another is paused or down, as past a
// production cluster's longer node timeout.
func noFailover(t *testing.T, admin *redis.ClusterClient) {
	t.Helper()
	err := admin.ForEachShard(t.Context(), func(ctx context.Context, node *redis.Client) error {
		return node.Do(ctx, "CONFIG", "SET", "cluster-replica-no-failover", "yes", "cluster-require-full-coverage", "no").Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// inTwoSlotsOfOneMaster returns the names of two Mutexes whose keys lie
// on one master of cl, in two slots.
func inTwoSlotsOfOneMaster(t *testing.T, cl *redistest.Cluster, admin *redis.ClusterClient) (string, string) {
	t.Helper()
	const first = "moving-0"
	m := masterOf(t, cl, admin, first)
	for i := 1; ; i++ {
		n := fmt.Sprintf("kept-%d", i)
		if masterOf(t, cl, admin, n) == m && keys.Slot("{"+n+"}") != keys.Slot("{"+first+"}") {
			return first, n
		}
	}
}

// moveKeysOf starts moving the slot of the Mutex called name to another
// master, and moves its keys there, leaving the move unfinished; it
// returns that master.
func moveKeysOf(t *testing.T, cl *redistest.Cluster, name string) *redistest.Server {
	t.Helper()
	mv := cl.MoveSlotOf(t, "dlock:{"+name+"}:mutex")
	mv.Begin()
	mv.Migrate()
	for _, s := range cl.Masters(t) {
		if s.Addr() == mv.To() {
			return s
		}
	}
	t.Fatalf("no master of the cluster at %s", mv.To())
	return nil
}

// TestClusterObserverFollowsFailover: an observer (pub/sub only) is
// subscribed on master A; A is paused, its replica takes over, and A
// resumes (as a replica) before the hub's ping would have found it
// silent. A demoted master may keep the shard subscription, answer pings
// and hear no more releases; the hub must notice, from the slot map, that
// the channel is served elsewhere, and a leader elected afterwards must
// be observed (it was not, in three runs of five).
func TestClusterObserverFollowsFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	admin := cl.Client(t)
	name := "paused-elect"
	victim := masterOf(t, cl, admin, name)
	var other *redistest.Server
	for _, m := range cl.Masters(t) {
		if m != victim {
			other = m
		}
	}
	slot := keys.Slot("{" + name + "}")
	watcher := dlock.New(cl.Client(t))
	defer watcher.Close()
	seen := watcher.Election(name).Observe(ctx)
	time.Sleep(time.Second) // subscribed
	oc := other.Client(t)
	t0 := time.Now()
	victim.Pause(t)
	for redistest.SlotMaster(ctx, oc, slot) == victim.Addr() {
		if time.Since(t0) > 20*time.Second {
			victim.Resume(t)
			t.Fatal("no failover")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failed over after %v", time.Since(t0))
	victim.Resume(t)
	cl.WaitHealthy(t)
	t.Logf("healthy after %v", time.Since(t0))
	select {
	case ld := <-seen:
		t.Logf("observed early %+v", ld)
	default:
	}
	campaigner := dlock.New(cl.Client(t, func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second }))
	defer campaigner.Close()
	var lead *dlock.Leadership
	var err error
	for range 50 {
		cctx, cc := context.WithTimeout(ctx, 2*time.Second)
		lead, err = campaigner.Election(name, dlock.WithTTL(60*time.Second)).TryCampaign(cctx, "new")
		cc()
		if err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	select {
	case ld := <-seen:
		t.Logf("observed %+v %v after campaign", ld, time.Since(t1))
	case <-time.After(15 * time.Second):
		for _, n := range cl.Nodes() {
			c := n.Client(t)
			role, _ := c.Do(ctx, "ROLE").Slice()
			chs, _ := c.Do(ctx, "PUBSUB", "SHARDCHANNELS").Slice()
			cls, _ := c.Do(ctx, "CLIENT", "LIST").Text()
			var subs []string
			for _, line := range strings.Split(cls, "\n") {
				if strings.Contains(line, "ssub=1") || strings.Contains(line, "cmd=ssubscribe") {
					subs = append(subs, line)
				}
			}
			t.Logf("%s victim=%v role=%v shardchannels=%v subs=%v", n.Addr(), n == victim, role[0], chs, subs)
		}
		t.Fatalf("leader elected after the failover not observed in 15s (term %d)", lead.Fence())
	}
}

// TestClusterDeadMasterWaiterBacksOff: a waiter whose lock's master dies
// (its replica too: no failover) keeps failing its tries, and they back
// off (10ms doubling to 1s). A subscription the hub gave up before Redis
// confirmed it (its node down) counts as a failed subscribe: it came back
// already woken, which ended every sleep at once, and the waiter tried
// back to back (13 to 28 tries in 3s).
func TestClusterDeadMasterWaiterBacksOff(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	ctx := t.Context()
	admin := cl.Client(t)
	name := "dead-0"
	victim := masterOf(t, cl, admin, name)
	holders := dlock.New(cl.Client(t))
	defer holders.Close()
	mustTake(t, ctx, holders.Mutex(name, dlock.WithNoExpiry()).Lock)
	cnt := &hook{mark: "waiting"}
	rdb := cl.Client(t)
	rdb.AddHook(cnt)
	c := dlock.New(rdb)
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 12*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := c.Mutex(name, dlock.WithMetadata("waiting")).Lock(wctx)
		got <- err
	}()
	time.Sleep(1500 * time.Millisecond) // queued, subscribed
	for _, nd := range cl.Nodes() {
		role, _ := nd.Client(t).Do(ctx, "ROLE").Slice()
		if len(role) > 2 && role[0] == "slave" && fmt.Sprint(role[1], ":", role[2]) == victim.Addr() {
			nd.Kill(t)
		}
	}
	victim.Kill(t)
	time.Sleep(3 * time.Second) // the backoff has grown
	before := cnt.marked.Load()
	time.Sleep(3 * time.Second)
	if n := cnt.marked.Load() - before; n > 8 {
		t.Errorf("the waiter sent %d tries in 3s while its master was dead; a backoff grown to 1s allows about 4", n)
	}
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Errorf("Lock: %v, want its cancellation", err)
	}
}
