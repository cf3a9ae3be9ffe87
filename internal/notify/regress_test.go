package notify

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/redistest"
)

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
	w, err := h.Subscribe(ctx, "a", "")
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
		if w, err := h.Subscribe(sctx, "b", ""); err == nil {
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
		if w, err := h.Subscribe(sctx, "c", ""); err == nil {
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
