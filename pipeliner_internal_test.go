package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/redistest"
)

// A script's arguments reach Redis through a pipeliner as through
// go-redis' own EvalSha, a lone slice of them flattened.
func TestPipelinedScriptArgsAsGoRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	retried, sentOnce := newPipeliners(rdb)
	echo := redis.NewScript("return ARGV")
	ctx := context.Background()
	for _, args := range [][]any{
		{"a", 1},
		{[]string{"b", "c"}},
		{[]any{"d", 2}},
		{"e"},
	} {
		want := fmt.Sprint(echo.Run(ctx, rdb, []string{"k"}, args...).Val())
		for _, s := range []redis.Scripter{retried.scripter, sentOnce.scripter} {
			cmd := echo.Run(ctx, s, []string{"k"}, args...)
			if got := fmt.Sprint(cmd.Val()); cmd.Err() != nil || got != want {
				t.Errorf("args %v: ARGV %s (%v) through a pipeliner, %s through go-redis", args, got, cmd.Err(), want)
			}
		}
	}
}

// A queued call answered unsent reads as never sent, and as no request
// that Redis may have applied: whose ctx ended while it waited, or that
// waited longer than the PoolTimeout. One that still waits is left
// queued.
func TestStaleCallsReadAsNeverSent(t *testing.T) {
	p := &pipeliner{patience: time.Second}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	now := time.Now()
	for _, c := range []struct {
		name   string
		ctx    context.Context
		queued time.Time
		unsent func(error) bool
	}{
		{"ctx ended", ended, now, endedUnsent},
		{"waited too long", context.Background(), now.Add(-2 * time.Second), neverSent},
	} {
		call := &piped{cmd: redis.NewCmd(c.ctx), done: make(chan struct{}), ctx: c.ctx, queued: c.queued}
		if !p.answeredStale(call, now) {
			t.Fatalf("%s: left queued", c.name)
		}
		err := call.cmd.Err()
		if !c.unsent(err) || unanswered(err) || mayHaveRun(err) {
			t.Errorf("%s: %v reads as unsent %v, unanswered %v, may have run %v", c.name, err, c.unsent(err), unanswered(err), mayHaveRun(err))
		}
		select {
		case <-call.done:
		default:
			t.Errorf("%s: not answered", c.name)
		}
	}
	waiting := &piped{cmd: redis.NewCmd(context.Background()), done: make(chan struct{}), ctx: context.Background(), queued: now}
	if p.answeredStale(waiting, now.Add(time.Second/2)) {
		t.Errorf("a call queued half its patience ago answered: %v", waiting.cmd.Err())
	}
}
