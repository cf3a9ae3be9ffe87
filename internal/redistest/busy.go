package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Busy has the server run a script that never ends, past a
// busy-reply-threshold of 50ms, so that it answers every other command
// BUSY, as a Redis stuck in a long script does; it returns once it does.
// end kills the script and returns once the server answers again.
func (s *Server) Busy(t testing.TB) (end func()) {
	t.Helper()
	ctx := context.Background()
	admin := s.Client(t)
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "50").Err(); err != nil {
		t.Fatal(err)
	}
	busy := func() bool { return redis.HasErrorPrefix(admin.Ping(ctx).Err(), "BUSY") }
	go s.Client(t).Eval(ctx, "while true do end", nil)
	for !busy() {
		time.Sleep(10 * time.Millisecond)
	}
	return func() {
		// SCRIPT KILL may return before the script has stopped.
		for busy() {
			admin.Do(ctx, "SCRIPT", "KILL")
			time.Sleep(10 * time.Millisecond)
		}
	}
}
