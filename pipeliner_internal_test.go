package dlock

import (
	"context"
	"fmt"
	"testing"

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
