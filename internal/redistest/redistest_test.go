package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartPing(t *testing.T) {
	s := Start(t, "--maxmemory", "10mb")
	ctx := context.Background()
	rdb := s.Client(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if want := fmt.Sprintf("127.0.0.1:%d", s.Port()); s.Addr() != want {
		t.Errorf("Addr() = %q, want %q", s.Addr(), want)
	}
	// The extra args must reach the command line.
	got, err := rdb.ConfigGet(ctx, "maxmemory").Result()
	if err != nil || got["maxmemory"] != "10485760" {
		t.Errorf("CONFIG GET maxmemory = %v, %v; want 10485760", got, err)
	}
}

// TestStartCountedCountsInstructions checks that a counted server's count
// grows with the work it is given, and starts again at each reading.
func TestStartCountedCountsInstructions(t *testing.T) {
	s := StartCounted(t)
	rdb := s.Client(t)
	ctx := context.Background()
	s.Instructions(t) // start, connection and all
	idle := s.Instructions(t)
	const pings = 200
	for range pings {
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	busy := s.Instructions(t)
	// A PING costs Redis some thousands of instructions: reading,
	// parsing, answering.
	if busy < idle+pings*1000 {
		t.Fatalf("%d instructions for %d PINGs, %d idle; want at least %d more", busy, pings, idle, pings*1000)
	}
	if again := s.Instructions(t); again >= busy {
		t.Fatalf("%d instructions read again at once; want fewer than the %d of the PINGs", again, busy)
	}
}

// TestCPUMicrosCountsTheServersWork checks that CPUMicros grows by what a
// script that keeps Redis busy costs, and by no more than the time that
// passed.
func TestCPUMicrosCountsTheServersWork(t *testing.T) {
	s := Start(t)
	rdb := s.Client(t)
	ctx := context.Background()
	before, t0 := CPUMicros(t, rdb), time.Now()
	busy := redis.NewScript("local n, i = tonumber(ARGV[1]), 0 while i < n do i = i + 1 end return i")
	if err := busy.Run(ctx, rdb, nil, 10_000_000).Err(); err != nil {
		t.Fatal(err)
	}
	used, elapsed := CPUMicros(t, rdb)-before, time.Since(t0).Microseconds()
	ran := CommandMicros(t, rdb, "evalsha", "eval")
	// Ten million steps of Lua take Redis some tens of milliseconds.
	if used < 10_000 || used > elapsed+50_000 {
		t.Fatalf("CPUMicros grew by %d µs over a script that ran %d µs, in %d µs; want at least 10,000 and at most the time that passed", used, ran, elapsed)
	}
}

func TestKill(t *testing.T) {
	s := Start(t)
	rdb := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING before Kill: %v", err)
	}
	pid := s.cmd.Process.Pid
	s.Kill(t)
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	// ESRCH also means the process was reaped: a zombie would still exist.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) = %v, want ESRCH", pid, err)
	}
	s.Kill(t) // a second Kill is a no-op
	s.Stop()
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	rdb := s.Client(t, func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
		o.MaxRetries = -1
	})
	ctx := context.Background()
	s.Pause(t)
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING to a paused server succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("PING to a paused server took %v, want about 200ms", d)
	}
	s.Resume(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestStopPaused(t *testing.T) {
	s := Start(t)
	pid := s.cmd.Process.Pid
	s.Pause(t)
	// Cleanup must kill a stopped process; do it here to check for leaks.
	s.Stop()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) = %v after Stop of a paused server, want ESRCH", pid, err)
	}
}

func TestRestart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	port, pid := s.Port(), s.cmd.Process.Pid
	s.Restart(t)
	if s.Port() != port {
		t.Errorf("port after Restart = %d, want %d", s.Port(), port)
	}
	if s.cmd.Process.Pid == pid {
		t.Error("Restart kept the old process")
	}
	// A fresh client: the old pooled connection died with the process.
	n, err := s.Client(t).DBSize(ctx).Result()
	if err != nil || n != 0 {
		t.Errorf("DBSIZE after Restart = %d, %v; want an empty server", n, err)
	}
	// Restart also brings back a killed server.
	s.Kill(t)
	s.Restart(t)
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Kill+Restart: %v", err)
	}
}

func TestStartN(t *testing.T) {
	servers := StartN(t, 3)
	if len(servers) != 3 {
		t.Fatalf("StartN(3) returned %d servers", len(servers))
	}
	ctx := context.Background()
	seen := map[string]bool{}
	for i, s := range servers {
		if seen[s.Addr()] {
			t.Fatalf("duplicate address %s", s.Addr())
		}
		seen[s.Addr()] = true
		if err := s.Client(t).Set(ctx, "i", i, 0).Err(); err != nil {
			t.Fatalf("SET on %s: %v", s.Addr(), err)
		}
	}
	// Each server kept its own value, so they are independent.
	for i, s := range servers {
		if got, err := s.Client(t).Get(ctx, "i").Int(); err != nil || got != i {
			t.Errorf("GET on %s = %d, %v; want %d", s.Addr(), got, err, i)
		}
	}
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("DLOCK_REDIS_SERVER", "/nonexistent/redis-server")
	_, err := binary("DLOCK_REDIS_SERVER", "redis-server", "redis-server")
	if err == nil || !strings.Contains(err.Error(),
		"redis-server not found in PATH: install it with `apt-get install -y redis-server`") {
		t.Errorf("binary() error = %v, want an install hint", err)
	}
}

func TestTail(t *testing.T) {
	var b tail
	for i := range 2000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	got := b.String()
	if len(got) > outputTail || !strings.HasPrefix(got, "line ") || !strings.HasSuffix(got, "line 1999\n") {
		t.Errorf("tail kept %d bytes: %.40q...%q", len(got), got, got[max(0, len(got)-20):])
	}
}

// checkClusterServes writes and reads back keys in many slots and checks that
// every master got some of them.
func checkClusterServes(t *testing.T, c *Cluster) {
	t.Helper()
	ctx := context.Background()
	rdb := c.Client(t)
	for i := range 100 {
		key := fmt.Sprintf("key-%d", i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := rdb.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
	}
	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	for _, m := range masters {
		n, err := m.Client(t).DBSize(ctx).Result()
		if err != nil || n == 0 {
			t.Errorf("master %s holds %d keys (%v); keys should spread over all masters", m.Addr(), n, err)
		}
	}
}

func TestCluster(t *testing.T) {
	start := time.Now()
	c := StartCluster(t)
	t.Logf("cluster created in %v", time.Since(start))
	if len(c.Addrs()) != 6 || len(c.Nodes()) != 6 {
		t.Fatalf("%d addrs, %d nodes; want 6", len(c.Addrs()), len(c.Nodes()))
	}
	checkClusterServes(t, c)
}

func TestClusterFailover(t *testing.T) {
	c := StartCluster(t)
	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	victim := masters[0]
	start := time.Now()
	victim.Kill(t)
	c.WaitHealthy(t)
	t.Logf("failover took %v", time.Since(start))
	for _, m := range c.Masters(t) {
		if m == victim {
			t.Fatalf("killed node %s still counted as master", victim.Addr())
		}
	}
	checkClusterServes(t, c)

	// The old master rejoins from its nodes.conf, as a replica.
	start = time.Now()
	victim.Restart(t)
	c.WaitHealthy(t)
	t.Logf("rejoin took %v", time.Since(start))
	if role, err := victim.Client(t).Do(context.Background(), "ROLE").Slice(); err != nil || len(role) == 0 || role[0] != "slave" {
		t.Errorf("ROLE of the restarted old master = %v, %v; want slave", role, err)
	}
	checkClusterServes(t, c)
}

func TestMissingSentinelBinary(t *testing.T) {
	t.Setenv("DLOCK_REDIS_SENTINEL", "/nonexistent/redis-sentinel")
	_, err := binary("DLOCK_REDIS_SENTINEL", "redis-sentinel", "redis-sentinel")
	if err == nil || !strings.Contains(err.Error(), "`apt-get install -y redis-sentinel`") {
		t.Errorf("binary() error = %v, want an install hint", err)
	}
}

// TestSentinel fails over twice through the Sentinels: once asked for
// (SENTINEL FAILOVER, the old master becomes the replica), once because the
// master was killed. A failover client follows both, and a key written
// before the first survives both (the replica was in sync).
func TestSentinel(t *testing.T) {
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("master, replica and 3 sentinels ready in %v", time.Since(start))
	if s.MasterName() == "" || len(s.SentinelAddrs()) != 3 || len(s.Sentinels()) != 3 {
		t.Fatalf("MasterName %q, %d sentinel addrs", s.MasterName(), len(s.SentinelAddrs()))
	}
	first, replica := s.Master(t), s.Replica(t)
	if first == replica || s.WaitMaster(t) != first {
		t.Fatalf("Master %s, Replica %s, WaitMaster disagrees", first.Addr(), replica.Addr())
	}
	ctx := context.Background()
	rdb := s.FailoverClient(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	// WAIT: the replica has the key before we fail over to it.
	if n, err := rdb.Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}

	start = time.Now()
	second := s.Failover(t)
	t.Logf("SENTINEL FAILOVER: new master after %v", time.Since(start))
	if second != replica || s.Master(t) != second || s.Replica(t) != first {
		t.Fatalf("after Failover: master %s, replica %s; want %s, %s",
			s.Master(t).Addr(), s.Replica(t).Addr(), replica.Addr(), first.Addr())
	}
	checkFollows(t, rdb, second)
	start = time.Now()
	if r := s.WaitReplica(t); r != first {
		t.Fatalf("WaitReplica = %s, want the old master %s", r.Addr(), first.Addr())
	}
	t.Logf("old master in sync as a replica after another %v", time.Since(start))

	start = time.Now()
	second.Kill(t)
	third := s.WaitMaster(t)
	t.Logf("master killed: new master after %v", time.Since(start))
	if third != first {
		t.Fatalf("after killing %s, master is %s; want %s", second.Addr(), third.Addr(), first.Addr())
	}
	checkFollows(t, rdb, third)
}

// checkFollows checks that the failover client reaches master and still
// reads the key written before the failovers.
func checkFollows(t *testing.T, rdb *redis.Client, master *Server) {
	t.Helper()
	ctx := context.Background()
	err := waitFor(func() error {
		got, err := rdb.Get(ctx, "k").Result()
		if err != nil || got != "v" {
			return fmt.Errorf("GET k = %q, %v", got, err)
		}
		role, err := rdb.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("ROLE through the failover client = %v, %v", role, err)
		}
		port, err := rdb.ConfigGet(ctx, "port").Result()
		if err != nil || port["port"] != strconv.Itoa(master.Port()) {
			return fmt.Errorf("failover client on port %v, %v; want %d", port, err, master.Port())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
