package notify

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/redistest"
)

// TestDetachUnconfirmedLeavesNoSubscription: a waiter subscribes to the
// release channel of a lock whose slot just moved to another master while
// the client's slot map still names the old one; Redis refuses that
// SSUBSCRIBE (MOVED). Other waiters' SSUBSCRIBEs sent on the same shard
// connection after it, not yet confirmed when the MOVED is read, are
// detached with it (the reply does not say which channel it refused).
// Redis then confirms them. Once every waiter is gone and the linger time
// passed, the hub's shard connections must be subscribed to nothing.
func TestDetachUnconfirmedLeavesNoSubscription(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	ctx := context.Background()
	h := New(rdb, slog.New(slog.DiscardHandler))
	defer h.Close()

	const moving = "dlock:{moving}:mutex:wake"
	servers := map[string]*redistest.Server{}
	for _, s := range cl.Nodes() {
		servers[s.Addr()] = s
	}
	admin := map[string]*redis.Client{}
	for addr := range servers {
		admin[addr] = redis.NewClient(&redis.Options{Addr: addr})
		defer admin[addr].Close()
	}
	seen := func(channel string) string { // the hub client's idea
		n, err := rdb.MasterForKey(ctx, channel)
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	actual := func(channel string) string {
		for _, a := range admin {
			if m := redistest.SlotMaster(ctx, a, keys.Slot(channel)); m != "" {
				return m
			}
		}
		return ""
	}
	// channelsOn returns n fresh channels served by addr (by the client's
	// map and by the cluster), in slots other than the moving one.
	next := 0
	channelsOn := func(addr string, n int) []string {
		var out []string
		for len(out) < n {
			c := fmt.Sprintf("dlock:{z%d}:mutex:wake", next)
			next++
			if keys.Slot(c) != keys.Slot(moving) && seen(c) == addr && actual(c) == addr {
				out = append(out, c)
			}
		}
		return out
	}

	var waiters []*Waiter
	defer func() {
		for _, w := range waiters {
			w.Close()
		}
	}()
	// A shard connection for every master, each with a channel whose
	// waiter stays until the end (the controls: unsubscribed after).
	for _, m := range cl.Masters(t) {
		c := channelsOn(m.Addr(), 1)[0]
		w, err := h.Subscribe(ctx, c, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		waiters = append(waiters, w)
	}

	detached := 0
	round := func(n int) {
		// Make the client's map stale for the moving slot.
		if seen(moving) == actual(moving) {
			mv := cl.MoveSlotOf(t, moving)
			mv.Begin()
			mv.Migrate()
			mv.Finish()
			if !eventuallyTrue(5*time.Second, func() bool { return actual(moving) != seen(moving) }) {
				t.Fatal("slot move not seen")
			}
		}
		old := seen(moving)
		zs := channelsOn(old, n)
		// Hold the old master so that the MOVED and the confirmations
		// after it come in one burst, MOVED first.
		srv := servers[old]
		srv.Pause(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var again []*Waiter
		sub := func(c string, retry bool) {
			defer wg.Done()
			w, err := h.Subscribe(ctx, c, "", nil)
			if err != nil {
				t.Errorf("Subscribe %s: %v", c, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !w.Detached() {
				waiters = append(waiters, w)
				return
			}
			detached++
			w.Close() // as wait.go does; this waiter then got its lock
			if retry && c != moving {
				// ... or not: it subscribes again at once, while the
				// confirmation of its first subscription is on its way.
				w, err := h.Subscribe(ctx, c, "", nil)
				if err != nil || w.Detached() {
					t.Errorf("Subscribe %s again: %v, detached %v", c, err, err == nil && w.Detached())
					return
				}
				waiters = append(waiters, w)
				again = append(again, w)
			}
		}
		wg.Add(1)
		go sub(moving, false)
		time.Sleep(100 * time.Millisecond) // its SSUBSCRIBE goes out first
		for i, z := range zs {
			wg.Add(1)
			go sub(z, i%2 == 0)
		}
		time.Sleep(200 * time.Millisecond)
		srv.Resume(t)
		wg.Wait()
		// Those that subscribed again hear a release.
		for _, w := range again {
			if n := rdb.SPublish(ctx, w.ch.name, WakeOne).Val(); n != 1 {
				t.Errorf("SPUBLISH %s reached %d subscribers, want 1", w.ch.name, n)
			}
			select {
			case <-w.C():
			case <-time.After(2 * time.Second):
				t.Errorf("%s: subscribed again after its detach, not woken by a release", w.ch.name)
			}
		}
		t.Logf("round: %d subscribed again", len(again))
	}
	// subscribed returns the shard channels each master holds, and the
	// ssub= counts of its pubsub connections.
	subscribed := func() (int, string) {
		total := 0
		var report []string
		for addr, a := range admin {
			if r, _ := a.Do(ctx, "ROLE").Slice(); len(r) == 0 || r[0] != "master" {
				continue
			}
			chs, err := a.Do(ctx, "PUBSUB", "SHARDCHANNELS").StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			list, _ := a.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
			var ssub []string
			for _, line := range strings.Split(list, "\n") {
				for _, f := range strings.Fields(line) {
					if strings.HasPrefix(f, "ssub=") {
						ssub = append(ssub, f)
					}
				}
			}
			total += len(chs)
			report = append(report, fmt.Sprintf("%s: %d shard channels %v", addr, len(chs), ssub))
		}
		return total, strings.Join(report, "; ")
	}
	closeAllAndCount := func() int {
		for _, w := range waiters {
			w.Close()
		}
		waiters = nil
		time.Sleep(linger + 2*time.Second)
		n, report := subscribed()
		t.Logf("after %d detached waiters: %s", detached, report)
		return n
	}

	round(5)
	if n := closeAllAndCount(); n != 0 {
		t.Errorf("size 1 (1 round of 5): %d shard channels still subscribed with no waiter", n)
	}
	for range 3 {
		round(5)
	}
	if n := closeAllAndCount(); n != 0 {
		t.Errorf("size 2 (4 rounds of 5): %d shard channels still subscribed with no waiter", n)
	}
	h.mu.Lock()
	t.Logf("hub keeps %d channels, %d shards", len(h.chans), len(h.shards))
	h.mu.Unlock()
}

func eventuallyTrue(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}
