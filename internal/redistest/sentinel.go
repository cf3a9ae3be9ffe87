package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	sentinelCount  = 3
	sentinelQuorum = 2
	masterName     = "dlock-master"
	// failoverWait bounds Failover and WaitMaster. A Sentinel failover
	// takes a few seconds (down-after 1s, an election, INFO every second
	// while promoting); a loaded machine may need several times that.
	failoverWait = 30 * time.Second
)

// Sentinel is a master, a replica and three Sentinels on loopback, all
// stopped in t.Cleanup. Roles move on failover: ask Master and Replica.
type Sentinel struct {
	data      []*Server // the master and the replica, in start order
	sentinels []*Server
}

// StartSentinel starts a master, a replica of it (--replicaof) and three
// Sentinels that monitor it with a quorum of 2, and waits until the
// Sentinels know the replica and each other, so that a failover can run.
// A missing redis-sentinel fails the test, with how to install it.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	sbin := mustBinary(t, "DLOCK_REDIS_SENTINEL", "redis-sentinel", "redis-sentinel")
	// Without the default 5s delay before a diskless full sync, a replica
	// is in sync within a second of (re)joining.
	fastSync := []string{"--repl-diskless-sync-delay", "0"}
	master := startServers(t, 1, false, fastSync)[0]
	replica := newServer(t, master.bin, append(fastSync, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	if err := startAll([]*Server{replica}); err != nil {
		t.Fatal(err)
	}
	s := &Sentinel{data: []*Server{master, replica}}
	if err := waitFor(func() error { return replicaSynced(replica.Addr(), master.Addr()) }); err != nil {
		t.Fatalf("redistest: replica %s of %s: %v", replica.Addr(), master.Addr(), err)
	}

	for range sentinelCount {
		sn := newServer(t, sbin, []string{"--sentinel"})
		sn.conf = filepath.Join(sn.dir, "sentinel.conf")
		// Sentinel rewrites this file as it learns the topology.
		conf := fmt.Sprintf(`sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d
sentinel down-after-milliseconds %[1]s 1000
sentinel failover-timeout %[1]s 4000
sentinel parallel-syncs %[1]s 1
sentinel resolve-hostnames no
`, masterName, master.Port(), sentinelQuorum)
		if err := os.WriteFile(sn.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		s.sentinels = append(s.sentinels, sn)
	}
	if err := startAll(s.sentinels); err != nil {
		t.Fatal(err)
	}
	// Sentinels find the replica through the master's INFO and each other
	// through hello messages every 2s.
	if err := waitFor(s.ready); err != nil {
		t.Fatalf("redistest: sentinels not ready after %v: %v", failoverWait, err)
	}
	return s
}

// MasterName is the name the Sentinels monitor the master under.
func (s *Sentinel) MasterName() string { return masterName }

// SentinelAddrs returns the Sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	return addrsOf(s.sentinels)
}

// Sentinels returns the Sentinel processes, so tests can Kill or Pause
// them.
func (s *Sentinel) Sentinels() []*Server {
	return append([]*Server(nil), s.sentinels...)
}

// Master returns the data node a Sentinel names as master now. It fails
// the test if no Sentinel answers or the address is not one of ours.
func (s *Sentinel) Master(t testing.TB) *Server {
	t.Helper()
	var err error
	for _, sn := range s.sentinels {
		var addr string
		if addr, err = masterAddr(sn); err == nil {
			if m := s.byAddr(addr); m != nil {
				return m
			}
			err = fmt.Errorf("sentinel %s names unknown master %s", sn.Addr(), addr)
		}
	}
	t.Fatalf("redistest: no master: %v", err)
	return nil
}

// Replica returns the data node that is not Master. After a failover
// caused by killing the master, that is the dead old master.
func (s *Sentinel) Replica(t testing.TB) *Server {
	t.Helper()
	if m := s.Master(t); m == s.data[0] {
		return s.data[1]
	}
	return s.data[0]
}

// FailoverClient returns a go-redis client that finds the master through
// the Sentinels (redis.NewFailoverClient), closed in t.Cleanup.
func (s *Sentinel) FailoverClient(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: masterName, SentinelAddrs: s.SentinelAddrs()}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// WaitMaster waits until every live Sentinel names the same master, which
// is alive and answers ROLE master, and returns it. After the master was
// killed, this is how long the failover took. It fails the test after 30s.
func (s *Sentinel) WaitMaster(t testing.TB) *Server {
	t.Helper()
	var m *Server
	if err := waitFor(func() (err error) { m, err = s.agreedMaster(); return err }); err != nil {
		t.Fatalf("redistest: no master after %v: %v", failoverWait, err)
	}
	return m
}

// Failover makes the Sentinels promote the replica (SENTINEL FAILOVER) and
// waits until every live Sentinel names it and it answers ROLE master. It
// returns the new master and fails the test after 30s. The old master
// stays a master until the Sentinels reconfigure it, about 10s later (see
// WaitReplica).
func (s *Sentinel) Failover(t testing.TB) *Server {
	t.Helper()
	old := s.WaitMaster(t)
	var m *Server
	err := waitFor(func() error {
		// Refused while a failover is in progress or the Sentinel does not
		// consider the replica fit yet: ask again.
		return s.sentinelDo("SENTINEL", "FAILOVER", masterName)
	})
	if err == nil {
		err = waitFor(func() (err error) {
			if m, err = s.agreedMaster(); err == nil && m == old {
				err = fmt.Errorf("%s is still the master", old.Addr())
			}
			return err
		})
	}
	if err != nil {
		t.Fatalf("redistest: failover from %s: %v", old.Addr(), err)
	}
	return m
}

// WaitReplica waits until the node that is not the master is an in-sync
// replica of it, as a Failover needs, and returns it. After a Failover the
// Sentinels turn the old master into a replica once they have seen it
// still claim the master role for a while (8s in Redis 7.0). It fails the
// test after 30s.
func (s *Sentinel) WaitReplica(t testing.TB) *Server {
	t.Helper()
	m := s.WaitMaster(t)
	r := s.Replica(t)
	if err := waitFor(func() error { return replicaSynced(r.Addr(), m.Addr()) }); err != nil {
		t.Fatalf("redistest: no replica after %v: %v", failoverWait, err)
	}
	return r
}

// ready reports why the Sentinels cannot fail over yet, or nil.
func (s *Sentinel) ready() error {
	for _, sn := range s.sentinels {
		rdb := adminClient(sn.Addr())
		info, err := rdb.Do(context.Background(), "SENTINEL", "MASTER", masterName).Result()
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
		fields := flatMap(info)
		if fields["num-slaves"] != "1" || fields["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
			return fmt.Errorf("sentinel %s knows %s replicas and %s other sentinels",
				sn.Addr(), fields["num-slaves"], fields["num-other-sentinels"])
		}
	}
	return nil
}

// agreedMaster returns the master every live Sentinel names, if it is
// alive and says it is a master.
func (s *Sentinel) agreedMaster() (*Server, error) {
	var addr string
	for _, sn := range s.sentinels {
		if !sn.alive() {
			continue
		}
		a, err := masterAddr(sn)
		if err != nil {
			return nil, fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("sentinels disagree: %s and %s", addr, a)
		}
		addr = a
	}
	m := s.byAddr(addr)
	switch {
	case addr == "":
		return nil, errors.New("no live sentinel")
	case m == nil:
		return nil, fmt.Errorf("sentinels name unknown master %s", addr)
	case !m.alive():
		return nil, fmt.Errorf("sentinels still name the dead master %s", addr)
	}
	rdb := adminClient(addr)
	defer rdb.Close()
	role, err := rdb.Do(context.Background(), "ROLE").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		return nil, fmt.Errorf("ROLE of %s = %v, %v; want master", addr, role, err)
	}
	return m, nil
}

// sentinelDo sends a command to the first live Sentinel.
func (s *Sentinel) sentinelDo(args ...any) error {
	for _, sn := range s.sentinels {
		if !sn.alive() {
			continue
		}
		rdb := adminClient(sn.Addr())
		err := rdb.Do(context.Background(), args...).Err()
		_ = rdb.Close()
		return err
	}
	return errors.New("no live sentinel")
}

func (s *Sentinel) byAddr(addr string) *Server {
	for _, d := range s.data {
		if d.Addr() == addr {
			return d
		}
	}
	return nil
}

// masterAddr asks one Sentinel for the master's address.
func masterAddr(sn *Server) (string, error) {
	rdb := adminClient(sn.Addr())
	defer rdb.Close()
	hp, err := rdb.Do(context.Background(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName).StringSlice()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME = %q", hp)
	}
	return hp[0] + ":" + hp[1], nil
}

// replicaSynced reports why addr is not yet an in-sync replica of master,
// or nil.
func replicaSynced(addr, master string) error {
	rdb := adminClient(addr)
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "replication").Result()
	if err != nil {
		return err
	}
	fields := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	got := fields["master_host"] + ":" + fields["master_port"]
	if fields["role"] != "slave" || got != master || fields["master_link_status"] != "up" {
		return fmt.Errorf("%s: role %s of %s, link %s; want an in-sync replica of %s",
			addr, fields["role"], got, fields["master_link_status"], master)
	}
	return nil
}

// flatMap reads a reply of alternating names and values (RESP2) or a map
// (RESP3).
func flatMap(reply any) map[string]string {
	fields := map[string]string{}
	switch r := reply.(type) {
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			fields[fmt.Sprint(r[i])] = fmt.Sprint(r[i+1])
		}
	case map[any]any:
		for k, v := range r {
			fields[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	}
	return fields
}

// waitFor calls check every 100ms until it returns nil, for at most
// failoverWait, and returns its last error.
func waitFor(check func() error) error {
	deadline := time.Now().Add(failoverWait)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
