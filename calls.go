package dlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// scriptCall is one run of a script: which, on which keys, with which
// arguments; sent alone (run) or in a pipeline with others (sendAll).
type scriptCall struct {
	s    *redis.Script
	keys []string
	args []any
}

// run sends the call alone, loading the script if Redis lacks it.
func (c scriptCall) run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	return c.s.Run(ctx, rdb, c.keys, c.args...)
}

// sendAll sends calls as EVALSHA in one pipeline, which go-redis splits
// by shard on a Cluster (one round trip per shard), and returns their
// commands, each with its own reply or error. Those whose script Redis
// lacks (after a restart, or the first time) go again in a second
// pipeline once the scripts are loaded.
func sendAll(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
	cmds := pipeline(ctx, rdb, calls)
	var missing []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		resend(ctx, rdb, calls, cmds, missing)
	}
	return cmds
}

// pipeline runs calls as EVALSHA in one pipeline.
func pipeline(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.s.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// resend loads the scripts of the calls at missing, which Redis lacked,
// and sends those calls again in one pipeline, replacing their commands.
func resend(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall, cmds []*redis.Cmd, missing []int) {
	again := make([]scriptCall, len(missing))
	loaded := map[*redis.Script]bool{}
	for j, i := range missing {
		again[j] = calls[i]
		if s := calls[i].s; !loaded[s] {
			loaded[s] = true
			if err := s.Load(ctx, rdb).Err(); err != nil {
				return // the first replies stand: NOSCRIPT
			}
		}
	}
	for j, cmd := range pipeline(ctx, rdb, again) {
		cmds[missing[j]] = cmd
	}
}
