package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
)

// scriptRuns counts the scripts a client runs, and the keys they name.
type scriptRuns struct{ runs, keys atomic.Int64 }

// hook counts every command rdb sends.
func (h *scriptRuns) hook() redis.Hook {
	return redistest.EachCommand(func(_ context.Context, cmd redis.Cmder) { h.count(cmd) })
}

func (h *scriptRuns) count(cmd redis.Cmder) {
	if name := cmd.Name(); name == "evalsha" || name == "eval" {
		h.runs.Add(1)
		n, _ := cmd.Args()[2].(int)
		h.keys.Add(int64(n))
	}
}

// clusterCountingRuns starts a Cluster and returns it with a client whose
// script runs, on every master, runs counts.
func clusterCountingRuns(t *testing.T) (*redistest.Cluster, *redis.ClusterClient, *scriptRuns) {
	cl := redistest.StartCluster(t)
	rdb, runs := cl.Client(t), &scriptRuns{}
	rdb.OnNewNode(func(node *redis.Client) { node.AddHook(runs.hook()) })
	return cl, rdb, runs
}

// renewals are n calls of owner_refresh on keys named prefix0..prefixN,
// each renewing token "tok<i>" to ttl.
func renewals(prefix string, n int, ttl time.Duration) []scriptCall {
	calls := make([]scriptCall, n)
	for i := range calls {
		calls[i] = owner{key: fmt.Sprint(prefix, i)}.renewal(fmt.Sprint("tok", i), ttl)
	}
	return calls
}

// A batch of renewals goes as runs of the batched script, at most
// mergeMax calls each, and every call gets the reply it would have had
// alone: extended to its own TTL, not the holder's, or its own Redis
// error, which stops none of the others.
func TestMergedCallsReplyEachAsAlone(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb, runs := srv.Client(t), &scriptRuns{}
	rdb.AddHook(runs.hook())
	const n = 2*mergeMax + 5
	calls := renewals("owner/", n, time.Minute)
	for i := 0; i < n; i += 4 { // a run carries leases of two TTLs
		calls[i] = owner{key: fmt.Sprint("owner/", i)}.renewal(fmt.Sprint("tok", i), 2*time.Minute)
	}
	for i := range n {
		switch i % 3 {
		case 0: // held by its token
			rdb.Set(ctx, fmt.Sprint("owner/", i), fmt.Sprintf("tok%d 7 0  meta", i), time.Second)
		case 1: // held by another
			rdb.Set(ctx, fmt.Sprint("owner/", i), "other 7 0  meta", time.Second)
		case 2: // not a string: Redis refuses the GET
			rdb.RPush(ctx, fmt.Sprint("owner/", i), "x")
		}
	}
	cmds := sendAll(ctx, rdb, calls)
	if got := runs.runs.Load(); got != 3 && got != 6 { // 6: the scripts loaded first
		t.Errorf("%d calls went as %d script runs, want 3 (at most %d calls a run)", n, got, mergeMax)
	}
	for i, cmd := range cmds {
		ok, err := cmd.Bool()
		key := fmt.Sprint("owner/", i)
		switch i % 3 {
		case 0:
			if !ok || err != nil {
				t.Fatalf("call %d (held) = %v, %v; want extended", i, ok, err)
			}
			want := time.Minute
			if i%4 == 0 {
				want = 2 * time.Minute
			}
			// (A run's expiry is a millisecond past its clock plus the TTL.)
			if ttl := rdb.PTTL(ctx, key).Val(); ttl < want-10*time.Second || ttl > want+time.Millisecond {
				t.Fatalf("%s has TTL %v after its renewal, want about %v", key, ttl, want)
			}
		case 1:
			if ok || err != nil {
				t.Fatalf("call %d (another's) = %v, %v; want not extended", i, ok, err)
			}
			if ttl := rdb.PTTL(ctx, key).Val(); ttl > time.Second {
				t.Fatalf("%s (another's) has TTL %v, want it unchanged", key, ttl)
			}
		case 2:
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("call %d (a list) = %v, %v; want its WRONGTYPE error", i, ok, err)
			}
		}
	}
}

// A batched run sets each lease's expiry later than the time it was sent
// plus its TTL, from which its holder counts: a PEXPIREAT at or before
// Redis' clock would delete the key at once, so an expiry at the run's
// clock plus the TTL, rounded down to the millisecond, could end a lease
// a run of the TTL's length later, before its holder's deadline.
func TestMergedRenewalsEndAfterSentPlusTTL(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	const n, ttl = 100, time.Minute
	calls := renewals("exp/", n, ttl)
	for i := range n {
		rdb.Set(ctx, fmt.Sprint("exp/", i), fmt.Sprintf("tok%d 7 0  meta", i), time.Second)
	}
	sendAll(ctx, rdb, calls) // loads the script
	for range 20 {
		sent, err := rdb.Time(ctx).Result() // Redis' clock, before the send
		if err != nil {
			t.Fatal(err)
		}
		for i, cmd := range sendAll(ctx, rdb, calls) {
			if ok, err := cmd.Bool(); !ok || err != nil {
				t.Fatalf("renewal %d = %v, %v; want extended", i, ok, err)
			}
		}
		for i := range n {
			at, err := rdb.PExpireTime(ctx, fmt.Sprint("exp/", i)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if end := sent.Add(ttl); !time.UnixMilli(int64(at / time.Millisecond)).After(end) {
				t.Fatalf("lease %d expires at %v; want after %v, its send time plus its TTL", i, time.UnixMilli(int64(at/time.Millisecond)), end)
			}
		}
	}
}

// A batched run that Redis refused as a whole (it ran none of its calls)
// sends them all alone.
func TestMergedRunRefusedGoesAlone(t *testing.T) {
	srv := redistest.Start(t)
	refused := srv.Client(t).Do(context.Background(), "NO-SUCH-COMMAND").Err()
	var rerr redis.Error
	if !errors.As(refused, &rerr) {
		t.Fatalf("an unknown command gave %v, want Redis' error", refused)
	}
	parts := []int{0, 1, 2}
	if alone := split(redis.NewCmdResult(nil, refused), wire{parts: parts, form: batchOf[ownerRefresh]}, make([]*redis.Cmd, 3)); len(alone) != 3 {
		t.Errorf("a refused run sends %v alone, want all of %v", alone, parts)
	}
}

// Out of memory, batched renewals still extend (PEXPIRE takes no
// memory), and each batched heartbeat, whose ZADD Redis refuses, gets
// Redis' OOM error as it would alone; the runs after it in the pipeline
// are read whole.
func TestMergedRunsOutOfMemory(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	const n = 2*mergeMax + 5
	renewals, _, beats := heldAndWaiting(t, srv, "oom", n)
	sendAll(ctx, rdb, append(renewals[:1:1], beats[0])) // loads the scripts
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
	for i, cmd := range sendAll(ctx, rdb, renewals) {
		if ok, err := cmd.Bool(); !ok || err != nil {
			t.Fatalf("renewal %d out of memory = %v, %v; want extended", i, ok, err)
		}
	}
	for i, cmd := range sendAll(ctx, rdb, beats) {
		var rerr redis.Error
		if err := cmd.Err(); !errors.As(err, &rerr) || !strings.HasPrefix(err.Error(), "OOM") {
			t.Fatalf("heartbeat %d out of memory = %v; want Redis' OOM error", i, err)
		}
	}
}

// On a Cluster a batch goes as one run per master (keys of many slots
// each, read with a GET each) and every call is answered: extended, or
// not the holder's (another's, or gone; such a reply, read from a key of
// another slot than the run's first, is confirmed alone: see split).
func TestMergedRunsOnCluster(t *testing.T) {
	_, rdb, runs := clusterCountingRuns(t)
	ctx := context.Background()
	const n = 60
	calls := renewals("cl/", n, time.Minute)
	for i := range n {
		if err := rdb.Set(ctx, fmt.Sprint("cl/", i), fmt.Sprintf("tok%d 1 0  ", i), time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sendAll(ctx, rdb, calls) // loads the script on every master
	runs.runs.Store(0)
	for i, cmd := range sendAll(ctx, rdb, calls) {
		if ok, err := cmd.Bool(); !ok || err != nil {
			t.Fatalf("renewal %d = %v, %v; want extended", i, ok, err)
		}
	}
	if got := runs.runs.Load(); got != 3 {
		t.Errorf("%d renewals on 3 masters went as %d script runs, want 3", n, got)
	}
	for i := range n {
		switch i % 3 {
		case 1:
			rdb.Set(ctx, fmt.Sprint("cl/", i), "other 1 0  ", time.Second)
		case 2:
			rdb.Del(ctx, fmt.Sprint("cl/", i)) // gone
		}
	}
	for i, cmd := range sendAll(ctx, rdb, calls) {
		ok, err := cmd.Bool()
		if err != nil || ok != (i%3 == 0) {
			t.Fatalf("renewal %d = %v, %v; want %v", i, ok, err, i%3 == 0)
		}
		ttl := rdb.PTTL(ctx, fmt.Sprint("cl/", i)).Val()
		if i%3 == 0 && ttl < 50*time.Second || i%3 == 1 && ttl > time.Second {
			t.Fatalf("cl/%d has TTL %v after its renewal, want about 1m when its own, else under 1s", i, ttl)
		}
	}
}

// On a Cluster a batch of heartbeats goes as one run per master, and each
// waiter's heartbeat is answered as alone: a refusal that renewed its
// place, or a try_now when its lock was handed to it or is free for it.
func TestMergedBeatsOnCluster(t *testing.T) {
	cl, rdb, runs := clusterCountingRuns(t)
	ctx := context.Background()
	const n = 30
	_, _, beats := heldAndWaitingOn(t, func() redis.UniversalClient { return cl.Client(t) }, "clbeat", n)
	sendAll(ctx, rdb, beats) // loads the script on every master
	for i := 0; i < n; i += 3 {
		rdb.Del(ctx, beats[i].keys[0]) // its holder gone: free for it
	}
	runs.runs.Store(0)
	for i, cmd := range sendAll(ctx, rdb, beats) {
		r, err := parseAttempt(cmd.Result())
		if err != nil || r.ok || r.at == 0 {
			t.Fatalf("heartbeat %d = %+v, %v; want a refusal dated by the server", i, r, err)
		}
		if free := i%3 == 0; free != (r.wait == 0) || !free && (r.wait != -1 || r.holder == 0) {
			t.Fatalf("heartbeat %d = %+v; want try_now when free, else a wait only for a wake-up (no expiry) behind a fence", i, r)
		}
	}
	if got := runs.runs.Load(); got != 3 {
		t.Errorf("%d heartbeats on 3 masters went as %d script runs, want 3", n, got)
	}
}

// A call in a batched run whose key lies on another node than the run
// (its slot moved after the batch was grouped) fails alone with Redis'
// "non local key" error, and split sends it alone, while the run's other
// calls are answered.
func TestMergedCallOnAnotherNodeGoesAlone(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	rdb := cl.Client(t)
	calls := renewals("moved/", 12, time.Minute)
	first, err := rdb.MasterForKey(ctx, calls[0].keys[0])
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]int, len(calls))
	elsewhere := map[int]bool{}
	for i, c := range calls {
		parts[i] = i
		rdb.Set(ctx, c.keys[0], fmt.Sprintf("tok%d 1 0  ", i), time.Second)
		if node, err := rdb.MasterForKey(ctx, c.keys[0]); err != nil || node != first {
			elsewhere[i] = true
		}
	}
	if len(elsewhere) == 0 || len(elsewhere) == len(calls) {
		t.Fatalf("%d of %d keys on other nodes: want some", len(elsewhere), len(calls))
	}
	w := batchWire(batchOf[ownerRefresh], calls, parts, true)
	cmds := make([]*redis.Cmd, len(calls))
	alone := split(sendEach(ctx, rdb, []scriptCall{w.call})[0], w, cmds)
	if len(alone) != len(elsewhere) {
		t.Errorf("split sends %v alone, want the %d calls on other nodes", alone, len(elsewhere))
	}
	for _, i := range alone {
		if !elsewhere[i] {
			t.Errorf("call %d is on the run's node, but goes alone", i)
		}
	}
	for i, cmd := range cmds {
		if ok, err := cmd.Bool(); !elsewhere[i] && (!ok || err != nil) {
			t.Errorf("renewal %d on the run's node = %v, %v; want extended", i, ok, err)
		}
	}
}

// A batched run sent to the node a slot is moving to, by an ASK
// redirection for its first key (moved already), must not read the keys
// of that slot not moved yet as missing: a lease still held would be
// lost. Its keys in that slot are declared, so Redis refuses the run
// (TRYAGAIN), and its calls go alone, each to its key's node.
func TestMergedRunDuringMigration(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	rdb := cl.Client(t)
	// Two keys of one slot, with different hash tags, as two locks' are.
	bySlot := map[int]string{}
	var k1, k2 string
	for i := 0; k2 == ""; i++ {
		k := fmt.Sprintf("{mig-%d}:mutex", i)
		if other, ok := bySlot[keys.Slot(k)]; ok {
			k1, k2 = other, k
		}
		bySlot[keys.Slot(k)] = k
	}
	slot := keys.Slot(k1)
	if got := rdb.ClusterKeySlot(ctx, k2).Val(); got != int64(slot) {
		t.Fatalf("Redis puts %q in slot %d, keys.Slot in %d", k2, got, slot)
	}
	calls := []scriptCall{owner{key: k1}.renewal("tok1", time.Minute), owner{key: k2}.renewal("tok2", time.Minute)}
	for i, c := range calls {
		if err := rdb.Set(ctx, c.keys[0], fmt.Sprintf("tok%d 1 0  ", i+1), 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sendAll(ctx, rdb, calls) // loads the script on every master
	src, err := rdb.MasterForKey(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	var dst *redis.Client
	for _, m := range cl.Masters(t) {
		if m.Addr() != src.Options().Addr {
			dst = m.Client(t)
			break
		}
	}
	srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
	host, port, _ := strings.Cut(dst.Options().Addr, ":")
	for _, cmd := range [][]any{
		{dst, "cluster", "setslot", slot, "importing", srcID},
		{src, "cluster", "setslot", slot, "migrating", dstID},
		{src, "migrate", host, port, k1, 0, 5000}, // k2 stays behind
	} {
		if err := cmd[0].(*redis.Client).Do(ctx, cmd[1:]...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd[1:], err)
		}
	}
	for i, cmd := range sendAll(ctx, rdb, calls) {
		if ok, err := cmd.Bool(); !ok || err != nil {
			t.Errorf("renewal of %s during its slot's migration = %v, %v; want extended", calls[i].keys[0], ok, err)
		}
	}
}

// A batched run sent, by an ASK redirection for its first key (moved
// already), to the node that key's slot is moving to reads there the keys
// of any other slot moving to that node: one not moved yet reads as
// missing. A lease still held on the old node must not be reported lost
// so: a renewal read undeclared that found no lease goes again alone, to
// its key's node. A lease gone indeed is still reported gone.
func TestMergedRunAskedReadsOtherMovingSlot(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	rdb := cl.Client(t)
	// Keys of three slots on one master: the first two slots move.
	k1 := "{ask-a}:mutex"
	src, err := rdb.MasterForKey(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	var others []string
	for i := 0; len(others) < 2; i++ {
		k := fmt.Sprintf("{ask-b-%d}:mutex", i)
		node, err := rdb.MasterForKey(ctx, k)
		if err == nil && node.Options().Addr == src.Options().Addr && keys.Slot(k) != keys.Slot(k1) &&
			(len(others) == 0 || keys.Slot(k) != keys.Slot(others[0])) {
			others = append(others, k)
		}
	}
	k2, gone := others[0], others[1]
	calls := []scriptCall{
		owner{key: k1}.renewal("tok1", time.Minute),
		owner{key: k2}.renewal("tok2", time.Minute),
		owner{key: gone}.renewal("tok3", time.Minute),
	}
	for i, c := range calls[:2] {
		if err := rdb.Set(ctx, c.keys[0], fmt.Sprintf("tok%d 1 0  ", i+1), 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sendAll(ctx, rdb, calls) // loads the script on every master
	var dst *redis.Client
	for _, m := range cl.Masters(t) {
		if m.Addr() != src.Options().Addr {
			dst = m.Client(t)
			break
		}
	}
	srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
	host, port, _ := strings.Cut(dst.Options().Addr, ":")
	for _, cmd := range [][]any{
		{dst, "cluster", "setslot", keys.Slot(k2), "importing", srcID}, // open, nothing moved
		{src, "cluster", "setslot", keys.Slot(k2), "migrating", dstID},
		{dst, "cluster", "setslot", keys.Slot(gone), "importing", srcID},
		{src, "cluster", "setslot", keys.Slot(gone), "migrating", dstID},
		{dst, "cluster", "setslot", keys.Slot(k1), "importing", srcID},
		{src, "cluster", "setslot", keys.Slot(k1), "migrating", dstID},
		{src, "migrate", host, port, k1, 0, 5000},
	} {
		if err := cmd[0].(*redis.Client).Do(ctx, cmd[1:]...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd[1:], err)
		}
	}
	cmds := sendAll(ctx, rdb, calls)
	for i, cmd := range cmds[:2] {
		if ok, err := cmd.Bool(); !ok || err != nil {
			t.Errorf("renewal of %s (held) during the moves = %v, %v; want extended", calls[i].keys[0], ok, err)
		}
	}
	if ok, err := cmds[2].Bool(); ok || err != nil {
		t.Errorf("renewal of %s (no lease) during the moves = %v, %v; want not extended", gone, ok, err)
	}
	if v := src.Get(ctx, k2).Val(); v != "tok2 1 0  " {
		t.Errorf("%s on the old master = %q; it was held all along", k2, v)
	}
}

// On a Cluster a call whose last send failed goes in a part of its own,
// up to apartMax of them, the others by master; on one Redis every call
// goes in one part.
func TestByMasterPutsFailedCallsApart(t *testing.T) {
	_, rdb, _ := clusterCountingRuns(t)
	ctx := context.Background()
	n := apartMax + 50
	calls := renewals("apart/", n, time.Minute)
	failed := make([]bool, n)
	for i := range apartMax + 10 {
		failed[i] = true
	}
	alone, byNode := 0, map[*redis.Client]int{}
	for _, part := range byMaster(ctx, rdb, calls, failed) {
		node, _ := nodeOf(ctx, rdb, calls[part[0]].keys)
		for _, i := range part {
			if other, _ := nodeOf(ctx, rdb, calls[i].keys); other != node {
				t.Fatalf("calls %d and %d, on two masters, went in one part", part[0], i)
			}
		}
		if len(part) == 1 && failed[part[0]] {
			alone++
			continue
		}
		byNode[node]++
	}
	if alone != apartMax {
		t.Errorf("%d failed calls went in parts of their own, want apartMax (%d)", alone, apartMax)
	}
	for node, parts := range byNode {
		if parts != 1 {
			t.Errorf("the calls that did not go apart went in %d parts on %s, want one", parts, node)
		}
	}
	if len(byNode) != 3 {
		t.Errorf("the calls that did not go apart went to %d masters, want 3", len(byNode))
	}
	one := redistest.Start(t).Client(t)
	if parts := byMaster(ctx, one, calls, failed); len(parts) != 1 || len(parts[0]) != n {
		t.Errorf("on one Redis the calls went in %d parts, want one of all %d", len(parts), n)
	}
}

// Every batched form loads on Redis (its flags included).
func TestBatchedScriptsLoad(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if len(batchOf) == 0 {
		t.Fatal("no script is sent in batches")
	}
	for s, batched := range batchOf {
		if err := batched.s.Load(context.Background(), rdb).Err(); err != nil {
			t.Errorf("the batched form of %s does not load: %v", s.Hash(), err)
		}
	}
}

// heldAndWaiting takes n Mutex leases on a client of srv and queues a
// waiter of that client on each of n Mutexes another client holds (with
// no expiry), and returns the calls that renew the leases, the waiters'
// tries (joining the queue they are in: what a heartbeat was before it
// had a script of its own) and their heartbeats.
func heldAndWaiting(tb testing.TB, srv *redistest.Server, prefix string, n int) (renewals, tries, beats []scriptCall) {
	tb.Helper()
	return heldAndWaitingOn(tb, func() redis.UniversalClient { return srv.Client(tb) }, prefix, n)
}

// heldAndWaitingOn is heldAndWaiting on the clients client makes.
func heldAndWaitingOn(tb testing.TB, client func() redis.UniversalClient, prefix string, n int) (renewals, tries, beats []scriptCall) {
	tb.Helper()
	ctx := context.Background()
	c, holders := New(client()), New(client())
	tb.Cleanup(func() { c.Close(); holders.Close() })
	for i := range n {
		l, err := c.Mutex(fmt.Sprintf("%s-held/%d", prefix, i), WithTTL(time.Minute)).TryLock(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		renewals = append(renewals, l.ops.(batchable).renewal(l.token, time.Minute))
		name, tok := fmt.Sprintf("%s-wait/%d", prefix, i), fmt.Sprint("waiter-", i)
		if _, err := holders.Mutex(name, WithNoExpiry()).TryLock(ctx); err != nil {
			tb.Fatal(err)
		}
		q := c.queued(kindMutex, name, nil)
		a := q.acquisition(true, "")
		if r, err := a.try(ctx, tok); err != nil || r.ok {
			tb.Fatalf("try of %s = %+v, %v; want queued", tok, r, err)
		}
		tries = append(tries, scriptCall{queueAcquire, q.kl, []any{tok, millis(time.Minute), mutexArgs.try[joinQueue]}})
		beats = append(beats, a.beat(tok))
	}
	return renewals, tries, beats
}

// A run of queue_beats.lua names a waiter's queue keys from its owner key
// (see tokenTail): the queued locks' keys must be named so.
func TestBeatKeysNamedFromOwner(t *testing.T) {
	c := New(redistest.Start(t).Client(t))
	defer c.Close()
	if want := []string{"queue", "alive", "wmeta"}; !slices.Equal(queuedParts[1:], want) {
		t.Errorf("a queued lock's parts after its fence are %q, want %q", queuedParts[1:], want)
	}
	for _, k := range []kind{kindMutex, kindFair, kindElect} {
		q := c.queued(k, "name", nil)
		for _, part := range queuedParts {
			if got, want := q.keys.Part(part), q.keys.Key()+":"+part; got != want {
				t.Errorf("%s: part %s is %q, want %q", k, part, got, want)
			}
		}
	}
}

// unpackRenewals reads the places of the leases a run did not extend,
// 1 for the rest, and refuses a reply it cannot place.
func TestUnpackRenewals(t *testing.T) {
	got, err := unpackRenewals([]any{int64(2), int64(0), int64(4), []any{"dlock:error", "WRONGTYPE"}}, 4)
	if err != nil || fmt.Sprint(got) != "[1 0 1 [dlock:error WRONGTYPE]]" {
		t.Errorf("unpackRenewals = %v, %v; want [1 0 1 [dlock:error WRONGTYPE]]", got, err)
	}
	for _, bad := range [][]any{{int64(1)}, {int64(0), int64(0)}, {int64(5), int64(0)}, {"1", int64(0)}} {
		if _, err := unpackRenewals(bad, 4); !errors.Is(err, errBadReply) {
			t.Errorf("unpackRenewals(%v) = %v, want errBadReply", bad, err)
		}
	}
}
