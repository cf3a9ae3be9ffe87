package redistest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSize    = 6 // 3 masters + 3 replicas
	createTimeout  = 60 * time.Second
	healthyTimeout = 30 * time.Second
	slotCount      = 16384
)

// Cluster is a Redis Cluster of 3 masters and 3 replicas on loopback, built
// with `redis-cli --cluster create`.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts a cluster, waits until it is healthy and stops it in
// t.Cleanup.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	cli := mustBinary(t, "DLOCK_REDIS_CLI", "redis-cli", "redis-tools")
	c := &Cluster{nodes: startServers(t, clusterSize, true, nil)}

	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitHealthy(t)
	return c
}

// Addrs returns the addresses of all nodes, masters and replicas.
func (c *Cluster) Addrs() []string {
	return addrsOf(c.nodes)
}

// Nodes returns all nodes, so tests can Kill, Pause or Restart any of them.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Masters returns the nodes that currently answer ROLE with "master". It
// asks the nodes because failover moves the role; dead or paused nodes are
// left out.
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	var masters []*Server
	for _, s := range c.nodes {
		if !s.alive() {
			continue
		}
		rdb := adminClient(s.Addr())
		role, err := rdb.Do(context.Background(), "ROLE").Slice()
		_ = rdb.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			masters = append(masters, s)
		}
	}
	return masters
}

// Client returns a new cluster client seeded with all node addresses,
// closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, opt := range opts {
		opt(o)
	}
	rdb := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// WaitHealthy waits until every live node reports cluster_state:ok and
// sees all 16384 slots served by live masters, the same ones on every
// node, and every live replica is linked to its master (synced once).
// Agreement matters after a Restart: a rejoining old master claims its old
// slots until it learns of the failover. It fails the test after 30s.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(healthyTimeout)
	for {
		err := c.healthy()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not healthy after %v: %v", healthyTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// healthy returns why the cluster is not healthy yet, or nil.
func (c *Cluster) healthy() error {
	live := map[string]bool{}
	for _, s := range c.nodes {
		if s.alive() {
			live[s.Addr()] = true
		}
	}
	if len(live) == 0 {
		return errors.New("no live nodes")
	}
	var first, firstAddr string
	for _, addr := range c.Addrs() {
		if !live[addr] {
			continue
		}
		rdb := adminClient(addr)
		view, err := checkNode(rdb, live)
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", addr, err)
		}
		if first == "" {
			first, firstAddr = view, addr
		} else if view != first {
			return fmt.Errorf("nodes disagree on slot masters: %s sees %s, %s sees %s",
				firstAddr, first, addr, view)
		}
	}
	return nil
}

// checkNode checks one node's view of the cluster and returns its slot
// map as a comparable string.
func checkNode(rdb *redis.Client, live map[string]bool) (string, error) {
	ctx := context.Background()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return "", err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return "", errors.New("cluster_state is not ok")
	}
	// A replica not yet synced would, promoted, lose what its master
	// holds: tests that kill a master would then meet the lagging-replica
	// case by chance.
	repl, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
		return "", errors.New("replica not linked to its master yet")
	}
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	type served struct {
		start, end int64
		master     string
	}
	var ranges []served
	for _, sh := range shards {
		master := ""
		for _, n := range sh.Nodes {
			// A master that failed may still be listed beside the replica
			// promoted in its place.
			if n.Role == "master" && (master == "" || n.Health == "online") {
				master = net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			}
		}
		for _, r := range sh.Slots {
			ranges = append(ranges, served{r.Start, r.End, master})
		}
	}
	slices.SortFunc(ranges, func(a, b served) int { return cmp.Compare(a.start, b.start) })
	count, view := int64(0), []string{}
	for _, r := range ranges {
		if !live[r.master] {
			return "", fmt.Errorf("slots %d-%d have no live master (%q)", r.start, r.end, r.master)
		}
		count += r.end - r.start + 1
		view = append(view, fmt.Sprintf("%d-%d@%s", r.start, r.end, r.master))
	}
	if count != slotCount {
		return "", fmt.Errorf("%d of %d slots served", count, slotCount)
	}
	return strings.Join(view, " "), nil
}
