package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
)

// SlotMove moves one hash slot of a Cluster from its master to another,
// in the steps `redis-cli --cluster reshard` takes, so that a test can
// stop between them: Begin, Migrate (every key left), Finish.
type SlotMove struct {
	t            testing.TB
	slot         int
	src, dst     *redis.Client
	srcID, dstID string
	all          []*redis.Client // every live node's
}

// MoveSlotOf prepares the move of key's slot to another master; nothing
// changes before Begin.
func (c *Cluster) MoveSlotOf(t testing.TB, key string) *SlotMove {
	t.Helper()
	m := &SlotMove{t: t, slot: keys.Slot(key)}
	for _, s := range c.nodes {
		if s.alive() {
			rdb := adminClient(s.Addr())
			t.Cleanup(func() { _ = rdb.Close() })
			m.all = append(m.all, rdb)
		}
	}
	owner := SlotMaster(context.Background(), m.all[0], m.slot)
	for _, s := range c.Masters(t) {
		var rdb *redis.Client
		switch {
		case s.Addr() == owner:
			rdb = adminClient(s.Addr())
			m.src = rdb
		case m.dst == nil:
			rdb = adminClient(s.Addr())
			m.dst = rdb
		default:
			continue
		}
		t.Cleanup(func() { _ = rdb.Close() })
	}
	if m.src == nil || m.dst == nil {
		t.Fatalf("redistest: no master serving slot %d (%q), or no other master", m.slot, owner)
	}
	m.srcID, m.dstID = m.must(m.src, "CLUSTER", "MYID"), m.must(m.dst, "CLUSTER", "MYID")
	return m
}

// To returns the address of the master the slot moves to.
func (m *SlotMove) To() string { return m.dst.Options().Addr }

// SlotMaster returns the address of the master of slot as node sees it
// ("" when it cannot tell).
func SlotMaster(ctx context.Context, node *redis.Client, slot int) string {
	shards, err := node.ClusterShards(ctx).Result()
	if err != nil {
		return ""
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int(r.Start) > slot || slot > int(r.End) {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return fmt.Sprintf("%s:%d", n.IP, n.Port)
				}
			}
		}
	}
	return ""
}

// Begin marks the slot importing on the new master and migrating on the
// old: from now on a script naming a key of the slot that is not where
// it is run is refused (TRYAGAIN, ASK).
func (m *SlotMove) Begin() {
	m.t.Helper()
	m.must(m.dst, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.srcID)
	m.must(m.src, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.dstID)
}

// Migrate moves every key of the slot still on the old master.
func (m *SlotMove) Migrate() {
	m.t.Helper()
	host, port, _ := strings.Cut(m.dst.Options().Addr, ":")
	ctx := context.Background()
	for {
		ks, err := m.src.ClusterGetKeysInSlot(ctx, m.slot, 100).Result()
		if err != nil {
			m.t.Fatalf("redistest: CLUSTER GETKEYSINSLOT: %v", err)
		}
		if len(ks) == 0 {
			return
		}
		for _, k := range ks {
			err := m.src.Do(ctx, "MIGRATE", host, port, k, 0, 5000).Err()
			if err != nil && !strings.Contains(err.Error(), "NOKEY") {
				m.t.Fatalf("redistest: MIGRATE %s: %v", k, err)
			}
		}
	}
}

// Finish gives the slot to the new master, telling it first, then the
// old, then every other node.
func (m *SlotMove) Finish() {
	m.t.Helper()
	m.must(m.dst, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID)
	m.must(m.src, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID)
	for _, rdb := range m.all {
		_ = rdb.Do(context.Background(), "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID).Err()
	}
}

// must runs a command on rdb, failing the test on an error; it returns
// the reply as text.
func (m *SlotMove) must(rdb *redis.Client, args ...any) string {
	m.t.Helper()
	v, err := rdb.Do(context.Background(), args...).Text()
	if err != nil {
		m.t.Fatalf("redistest: %v on %s: %v", args, rdb.Options().Addr, err)
	}
	return v
}
