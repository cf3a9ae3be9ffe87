package dlock

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// mergeMax is the most calls one batched run carries (see merge): enough
// to spread the cost of a script call thin, few enough that one run keeps
// Redis from its other clients for well under a millisecond.
const mergeMax = 100

// batchOf maps each script whose calls go in batches (see sendAll) to its
// batched form: a script whose one run does the work of many calls. Only
// the hot ones have one: a held lease's renewal and a queued waiter's
// heartbeat.
var batchOf = map[*redis.Script]batchForm{}

// batchForm is a batched script and how a run of it carries its calls:
// pack returns the run's ARGV for the calls at parts, and the order in
// which the run replies to them. single is true on a single Redis (not a
// Cluster), where a run may read its keys with one command.
type batchForm struct {
	s    *redis.Script
	pack func(calls []scriptCall, parts []int, single bool) (args []any, order []int)
}

// loadBatched loads the script name and its batched form, batched, whose
// runs are packed by pack.
func loadBatched(name, batched string, pack func([]scriptCall, []int, bool) ([]any, []int)) *redis.Script {
	s := lua.MustLoad(name)
	batchOf[s] = batchForm{lua.MustLoad(batched), pack}
	return s
}

// wire is what a batch sends to Redis for some of its calls: one call
// alone (parts nil: the call at one), or a run of a script's batched form
// that carries the calls at parts.
type wire struct {
	call  scriptCall
	one   int
	parts []int
}

// merge turns a batch of calls into the fewest script runs: the calls of
// one script whose keys lie on one node go as runs of its batched form,
// mergeMax calls at most each; the rest go alone. Only a plain client or
// a Cluster's (grouped by the master of each call's first key) merges:
// another UniversalClient may spread keys in ways dlock cannot see.
func merge(ctx context.Context, rdb redis.UniversalClient, calls []scriptCall) []wire {
	type group struct {
		s    *redis.Script // the calls' script, which has a batched form
		node *redis.Client
	}
	var order []group
	groups := map[group][]int{}
	wires := make([]wire, 0, len(calls))
	for i, c := range calls {
		node, ok := nodeOf(ctx, rdb, c.keys)
		g := group{c.s, node}
		if _, batched := batchOf[c.s]; !ok || !batched {
			wires = append(wires, wire{call: c, one: i})
			continue
		}
		if groups[g] == nil {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	for _, g := range order {
		idx := groups[g]
		for len(idx) > 0 {
			n := min(len(idx), mergeMax)
			wires = append(wires, batchWire(batchOf[g.s], calls, idx[:n], g.node == nil))
			idx = idx[n:]
		}
	}
	return wires
}

// nodeOf returns the node keys lie on for merge: nil on a plain client,
// the master of the first key on a Cluster; !ok when calls to rdb are not
// to be merged.
func nodeOf(ctx context.Context, rdb redis.UniversalClient, keys []string) (*redis.Client, bool) {
	if len(keys) == 0 {
		return nil, false
	}
	switch r := rdb.(type) {
	case *redis.Client:
		return nil, true
	case *redis.ClusterClient:
		node, err := r.MasterForKey(ctx, keys[0])
		return node, err == nil
	}
	return nil, false
}

// batchWire is one run of batched carrying the calls at parts, or the call
// alone when it is the only one; single as for batchForm.pack.
func batchWire(batched batchForm, calls []scriptCall, parts []int, single bool) wire {
	if len(parts) == 1 {
		return wire{call: calls[parts[0]], one: parts[0]}
	}
	args, order := batched.pack(calls, parts, single)
	return wire{call: scriptCall{s: batched.s, keys: calls[order[0]].keys[:1], args: args}, parts: order}
}

// packCalls packs a run of a batched form written with each_call
// (lua/lib/batch.lua): for each call in turn, the number of its keys, the
// number of its arguments, its keys and its arguments.
func packCalls(calls []scriptCall, parts []int, _ bool) ([]any, []int) {
	size := 0
	for _, i := range parts {
		size += 2 + len(calls[i].keys) + len(calls[i].args)
	}
	args := make([]any, 0, size)
	for _, i := range parts {
		c := calls[i]
		args = append(args, len(c.keys), len(c.args))
		for _, k := range c.keys {
			args = append(args, k)
		}
		args = append(args, c.args...)
	}
	return args, parts
}

// packRenewals packs a run of owner_renewals.lua for owner renewals
// (owner.renewal without an announcement: one key; token and TTL): the
// leases grouped by TTL, each group its TTL, its size, its keys and its
// tokens, the groups in the order of their first lease. On a single Redis
// the run reads each group's keys with one MGET.
func packRenewals(calls []scriptCall, parts []int, single bool) ([]any, []int) {
	mode := "0"
	if single {
		mode = "1"
	}
	args := append(make([]any, 0, 3+2*len(parts)), mode)
	order := make([]int, 0, len(parts))
	taken := make([]bool, len(parts))
	for len(order) < len(parts) {
		var ttl any
		var group []int
		for j, i := range parts {
			if !taken[j] && (group == nil || calls[i].args[1] == ttl) {
				ttl, taken[j] = calls[i].args[1], true
				group = append(group, i)
			}
		}
		args = append(args, ttl, len(group))
		for _, i := range group {
			args = append(args, calls[i].keys[0])
		}
		for _, i := range group {
			args = append(args, calls[i].args[0])
		}
		order = append(order, group...)
	}
	return args, order
}

// split gives each call a batched run carried its own command, from the
// run's reply, into cmds, and returns those that are to go alone: all of
// them when Redis refused the run as a whole (it ran none: out of memory,
// say), else those that found a key of theirs on another node (a slot on
// the move).
func split(run *redis.Cmd, parts []int, cmds []*redis.Cmd) (alone []int) {
	replies, err := run.Slice()
	var refused redis.Error
	if errors.As(err, &refused) && err != redis.Nil {
		return parts
	}
	if err == nil && len(replies) != len(parts) {
		err = errBadReply
	}
	for j, i := range parts {
		if err != nil {
			cmds[i] = redis.NewCmdResult(nil, err)
			continue
		}
		cmds[i] = replyCmd(replies[j])
		if err := cmds[i].Err(); err != nil && strings.Contains(err.Error(), "non local key") {
			alone = append(alone, i)
		}
	}
	return alone
}

// replyCmd is the command a call sent alone would have given for v, its
// place in a batched run's reply (see each_call in lua/lib/batch.lua).
func replyCmd(v any) *redis.Cmd {
	if v == nil {
		return redis.NewCmdResult(nil, redis.Nil)
	}
	if e, ok := v.([]any); ok && len(e) == 2 && e[0] == "dlock:error" {
		msg, _ := e[1].(string)
		return redis.NewCmdResult(nil, callError(msg))
	}
	return redis.NewCmdResult(v, nil)
}

// callError is the Redis error of one call in a batched run, as the call
// alone would have had it.
type callError string

func (e callError) Error() string { return string(e) }

// RedisError marks it a reply from Redis (see redis.Error).
func (callError) RedisError() {}
