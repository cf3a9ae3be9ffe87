package dlock

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// scriptCall is one run of a script: which, on which keys, with which
// arguments; sent alone (run) or in a batch with others (sendAll).
type scriptCall struct {
	s    *redis.Script
	keys []string
	args []any
}

// run sends the call alone, loading the script if Redis lacks it.
func (c scriptCall) run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	return c.s.Run(ctx, rdb, c.keys, c.args...)
}

// once is rdb for a script that must not run twice unseen: go-redis sends
// its EVAL and EVALSHA once, not again by itself after a broken
// connection or a timeout, when Redis may have run it already. A release
// run twice finds its lease gone the second time, and would report it
// lost; Unlock sends it again itself, knowing that an earlier attempt may
// have got through (see Lease.sendRelease).
type once struct{ redis.UniversalClient }

func (o once) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return o.send(ctx, "eval", src, keys, args)
}

func (o once) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.send(ctx, "evalsha", sha1, keys, args)
}

// send has the command sent at most once.
func (o once) send(ctx context.Context, name, body string, keys []string, args []any) *redis.Cmd {
	cmd := scriptCmd(ctx, name, body, keys, args)
	_ = o.Process(ctx, sentOnce{cmd})
	return cmd
}

// scriptCmd builds a script's command, name "eval" or "evalsha", as
// go-redis' Eval and EvalSha do, a lone []any or []string argument
// flattened as theirs is.
func scriptCmd(ctx context.Context, name, body string, keys []string, args []any) *redis.Cmd {
	if len(args) == 1 {
		switch v := args[0].(type) {
		case []any:
			args = v
		case []string:
			args = make([]any, len(v))
			for i, s := range v {
				args[i] = s
			}
		}
	}
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// sentOnce is a command go-redis does not send again (see once).
type sentOnce struct{ *redis.Cmd }

// NoRetry tells go-redis not to send the command again.
func (sentOnce) NoRetry() bool { return true }

// sendAll sends calls in one pipeline, which go-redis splits by shard on
// a Cluster (one round trip per shard), as the fewest script runs (see
// merge), and returns their commands, each with its own reply or error.
// The calls of a batched run that Redis refused (see split) go again
// alone in a second pipeline.
func sendAll(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
	wires := merge(ctx, rdb, calls)
	runs := make([]scriptCall, len(wires))
	for i, w := range wires {
		runs[i] = w.call
	}
	cmds := make([]*redis.Cmd, len(calls))
	var refused []int
	for i, cmd := range sendEach(ctx, rdb, runs) {
		if w := wires[i]; w.parts == nil {
			cmds[w.one] = cmd
		} else {
			refused = append(refused, split(cmd, w, cmds)...)
		}
	}
	if len(refused) > 0 {
		alone := make([]scriptCall, len(refused))
		for j, i := range refused {
			alone[j] = calls[i]
		}
		for j, cmd := range sendEach(ctx, rdb, alone) {
			cmds[refused[j]] = cmd
		}
	}
	return cmds
}

// sendEach sends calls as EVALSHA in one pipeline and returns their
// commands. Those whose script Redis lacks (after a restart, or the first
// time) go again in a second pipeline that loads it (see resend).
func sendEach(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
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

// resend sends the calls at missing again, whose script Redis lacked, in
// one pipeline, replacing their commands: the first call of each script
// on each node as EVAL, which leaves the script with Redis for the
// EVALSHA of the others. (A call whose node is not known goes as EVAL.)
// An EVALSHA that still finds no script (its EVAL went to another node:
// its slot is on the move) goes once more, as EVAL.
func resend(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall, cmds []*redis.Cmd, missing []int) {
	evalAll := false
	for range 2 {
		sendLoading(ctx, rdb, calls, cmds, missing, evalAll)
		missing = slices.DeleteFunc(missing, func(i int) bool { return !redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") })
		if len(missing) == 0 {
			return
		}
		evalAll = true
	}
}

// sendLoading is one pipeline of resend: the first call of each script on
// each node as EVAL, or every call when evalAll.
func sendLoading(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall, cmds []*redis.Cmd, missing []int, evalAll bool) {
	type loaded struct {
		s    *redis.Script
		node *redis.Client
	}
	sent := map[loaded]bool{}
	pipe := rdb.Pipeline()
	again := make([]*redis.Cmd, len(missing))
	for j, i := range missing {
		c := calls[i]
		node, known := nodeOf(ctx, rdb, c.keys)
		if k := (loaded{c.s, node}); known && sent[k] && !evalAll {
			again[j] = c.s.EvalSha(ctx, pipe, c.keys, c.args...)
		} else {
			sent[k] = true
			again[j] = c.s.Eval(ctx, pipe, c.keys, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx)
	for j, i := range missing {
		cmds[i] = again[j]
	}
}
