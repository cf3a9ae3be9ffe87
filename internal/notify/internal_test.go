package notify

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/redistest"
)

// After a cluster shard's connection drops, its channels (here of two
// slots on one master, which one SSUBSCRIBE could not carry) are detached
// and their waiters woken; subscribing again delivers releases again.
func TestClusterRestartDetaches(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	ctx := context.Background()
	h := New(rdb, slog.New(slog.DiscardHandler))
	defer h.Close()

	// two channels with different slots on the same master
	first := "dlock:{x0}:mutex:wake"
	n0, _ := rdb.MasterForKey(ctx, first)
	var second string
	for i := 1; ; i++ {
		c := fmt.Sprintf("dlock:{x%d}:mutex:wake", i)
		n, _ := rdb.MasterForKey(ctx, c)
		if n.Options().Addr == n0.Options().Addr {
			s1, _ := rdb.ClusterKeySlot(ctx, first).Result()
			s2, _ := rdb.ClusterKeySlot(ctx, c).Result()
			if s1 != s2 {
				second = c
				break
			}
		}
	}
	w1, err := h.Subscribe(ctx, first, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	w2, err := h.Subscribe(ctx, second, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	admin := redis.NewClient(&redis.Options{Addr: n0.Options().Addr})
	defer admin.Close()
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*Waiter{w1, w2} {
		select {
		case <-w.C():
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not woken when its shard connection dropped")
		}
		if !w.Detached() {
			t.Fatal("waiter still attached to a dropped shard")
		}
	}
	again, err := h.Subscribe(ctx, first, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if n := rdb.SPublish(ctx, first, WakeOne).Val(); n != 1 {
		t.Fatalf("SPUBLISH reached %d subscribers, want 1", n)
	}
	select {
	case <-again.C():
	case <-time.After(2 * time.Second):
		t.Fatal("release not delivered after subscribing again")
	}
}

// Every path takes sh.cmdMu before h.mu. This replays the interleaving
// that deadlocked when Subscribe took them the other way round: a command
// in flight holds cmdMu, restart and a new Subscribe queue behind it.
func TestNoLockOrderDeadlock(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	admin := srv.Client(t)
	h := New(rdb, slog.New(slog.DiscardHandler))
	defer h.Close()
	ctx := context.Background()
	w, err := h.Subscribe(ctx, "a", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sh := h.shards[""]

	// Third party: a Subscribe of another channel in the middle of writing
	// its SUBSCRIBE (holds cmdMu during network I/O).
	sh.cmdMu.Lock()
	// The subscription connection drops: the receive loop calls restart,
	// which queues on cmdMu.
	if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	// A new waiter on channel b: takes h.mu, queues on cmdMu holding it.
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if w, err := h.Subscribe(sctx, "b", "", nil); err == nil {
			w.Close()
		}
	}()
	time.Sleep(200 * time.Millisecond)
	sh.cmdMu.Unlock() // the third party's write finishes

	// A later hub call must go through.
	done := make(chan struct{})
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if w, err := h.Subscribe(sctx, "c", "", nil); err == nil {
			w.Close()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		var rel []string
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "notify.") {
				rel = append(rel, g)
			}
		}
		t.Fatalf("hub deadlocked:\n%s", strings.Join(rel, "\n\n"))
	}
}
