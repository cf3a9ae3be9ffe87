package dlock

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
)

// mergeMax is the most calls one batched run carries (see merge): enough
// to spread the cost of a script call thin, few enough that one run keeps
// Redis from its other clients for well under a millisecond.
const mergeMax = 100

// batchOf maps each script whose calls go in batches (see sendAll) to its
// batched form: a script whose one run does the work of many calls. Only
// the hot ones have one: a held lease's renewal (owner_renewals.lua) and
// a queued waiter's heartbeat (queue_beats.lua).
var batchOf = map[*redis.Script]batchForm{}

// batchForm is a batched script and how a run of it carries its calls.
// Each call's first key is the owner key of a lock, which a run reads
// (see pack); tail appends what else of the call the run needs, and
// unpack turns the run's reply into the replies of its n calls, each as
// the call alone would have had it.
type batchForm struct {
	s      *redis.Script
	tail   func(args []any, c scriptCall) []any
	unpack func(reply []any, n int) ([]any, error)
	// unsure reports whether a call's reply, read from a key the run did
	// not declare, may be a missing key misread (see split); nil: never.
	unsure func(reply any) bool
}

// loadBatched loads the script name and its batched form (see batchForm).
func loadBatched(name, batched string, tail func([]any, scriptCall) []any, unpack func([]any, int) ([]any, error), unsure func(any) bool) *redis.Script {
	s := lua.MustLoad(name)
	batchOf[s] = batchForm{lua.MustLoad(batched), tail, unpack, unsure}
	return s
}

// pack returns the ARGV of a run carrying the calls at parts, and the
// order in which the run replies to them: the calls grouped by their
// second argument (a TTL, a liveness timeout), each group that argument
// once, its size, its calls' owner keys (which the run reads with one
// MGET), and their tails; the groups in the order of their first call.
func (f batchForm) pack(calls []scriptCall, parts []int) ([]any, []int) {
	args := make([]any, 0, 2+len(parts)*2)
	order := make([]int, 0, len(parts))
	taken := make([]bool, len(parts))
	for len(order) < len(parts) {
		var by any
		var group []int
		for j, i := range parts {
			if !taken[j] && (group == nil || calls[i].args[1] == by) {
				by, taken[j] = calls[i].args[1], true
				group = append(group, i)
			}
		}
		args = append(args, by, len(group))
		for _, i := range group {
			args = append(args, calls[i].keys[0])
		}
		for _, i := range group {
			args = f.tail(args, calls[i])
		}
		order = append(order, group...)
	}
	return args, order
}

// tokenTail is what a batched run needs of a call besides its owner key:
// its token, the call's first argument. So it is for a renewal in a run
// of owner_renewals.lua (owner.renewal without an announcement) and for
// a queued waiter's heartbeat in a run of queue_beats.lua
// (queued.tryScript), which names the queue's three keys from the owner
// key, as Client.queued makes them.
func tokenTail(args []any, c scriptCall) []any { return append(args, c.args[0]) }

// unpackRenewals reads the reply of a run of owner_renewals.lua, the
// places (from 1) and replies of the leases it did not extend, into the
// reply of each renewal alone (owner_refresh.lua): 1 for every other.
func unpackRenewals(reply []any, n int) ([]any, error) {
	if len(reply)%2 != 0 {
		return nil, errBadReply
	}
	out := make([]any, n)
	for i := range out {
		out[i] = int64(1)
	}
	for j := 0; j < len(reply); j += 2 {
		at, ok := reply[j].(int64)
		if !ok || at < 1 || at > int64(n) {
			return nil, errBadReply
		}
		out[at-1] = reply[j+1]
	}
	return out, nil
}

// notExtended reports a renewal's reply that its lease is not the token's
// any more, the one a renewal read from a missing key gives.
func notExtended(reply any) bool { return reply == int64(0) }

// unpackBeats reads the flat reply of a run of queue_beats.lua, {now,
// then wait and fence per call}, into the reply of each heartbeat alone
// (queue_beat.lua): {0, wait, fence, now}, or its error.
func unpackBeats(reply []any, n int) ([]any, error) {
	if len(reply) != 1+2*n {
		return nil, errBadReply
	}
	now, out := reply[0], make([]any, n)
	for i := range out {
		wait, fence := reply[1+2*i], reply[2+2*i]
		if e, failed := wait.([]any); failed {
			out[i] = e
			continue
		}
		out[i] = []any{int64(0), wait, fence, now}
	}
	return out, nil
}

// wire is what a batch sends to Redis for some of its calls: one call
// alone (parts nil: the call at one), or a run of a script's batched form
// that carries the calls at parts.
type wire struct {
	call  scriptCall
	one   int
	parts []int
	form  batchForm // the run's
	// undeclared marks the calls at parts whose keys the run reads
	// without declaring them (on a Cluster, those of other slots than its
	// first call's; see slotKeys); nil when it declares every one.
	undeclared []bool
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
	wires := make([]wire, 0, len(calls))
	var merged []int
	nodes := make([]*redis.Client, len(calls))
	for i, c := range calls {
		node, ok := nodeOf(ctx, rdb, c.keys)
		if _, batched := batchOf[c.s]; !ok || !batched {
			wires = append(wires, wire{call: c, one: i})
			continue
		}
		nodes[i], merged = node, append(merged, i)
	}
	for _, idx := range groupBy(merged, func(i int) group { return group{calls[i].s, nodes[i]} }) {
		s, cluster := calls[idx[0]].s, nodes[idx[0]] != nil
		for len(idx) > 0 {
			n := min(len(idx), mergeMax)
			wires = append(wires, batchWire(batchOf[s], calls, idx[:n], cluster))
			idx = idx[n:]
		}
	}
	return wires
}

// groupBy splits idx by key: the groups in the order of their first
// index, each in idx's order.
func groupBy[K comparable](idx []int, key func(i int) K) [][]int {
	var out [][]int
	at := map[K]int{} // a key's group in out
	for _, i := range idx {
		k := key(i)
		g, seen := at[k]
		if !seen {
			g, at[k] = len(out), len(out)
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
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
// alone when it is the only one. The run is sent to the node of its first
// call's first key, its KEYS[1]; on a Cluster its KEYS also name the keys
// of every call in that key's slot (see slotKeys).
func batchWire(batched batchForm, calls []scriptCall, parts []int, cluster bool) wire {
	if len(parts) == 1 {
		return wire{call: calls[parts[0]], one: parts[0]}
	}
	args, order := batched.pack(calls, parts)
	declared := calls[order[0]].keys[:1]
	var undeclared []bool
	if cluster {
		declared, undeclared = slotKeys(calls, order)
	}
	run := scriptCall{s: batched.s, keys: declared, args: args}
	return wire{call: run, parts: order, form: batched, undeclared: undeclared}
}

// slotKeys are the keys a run of the calls at order declares on a
// Cluster: its first call's keys, then every key of the calls in their
// slot; and which calls, in order's order, it reads undeclared. A run
// reads its other keys undeclared, which Redis checks against its node,
// but not against a slot on the move: run on the node a slot is moving
// to (sent there by an ASK redirection, for its first key), it would read
// a key of that slot not moved yet as missing, a lease as lost. Declared,
// a key missing from a slot on the move makes Redis refuse the whole run
// (TRYAGAIN, or ASK), and its calls go alone (see split). A key of
// another slot also moving to that node is read there all the same, as
// the redirection allows: so a reply read undeclared that a missing key
// would give is confirmed alone (see split). (A call's keys are one
// lock's, which share a hash tag: its first key's slot is theirs.)
func slotKeys(calls []scriptCall, order []int) ([]string, []bool) {
	first := calls[order[0]].keys
	slot := keys.Slot(first[0])
	out := append([]string(nil), first...)
	undeclared := make([]bool, len(order))
	for j, i := range order[1:] {
		if keys.Slot(calls[i].keys[0]) == slot {
			out = append(out, calls[i].keys...)
		} else {
			undeclared[j+1] = true
		}
	}
	return out, undeclared
}

// split gives each call the batched run w carried its own command, from
// the run's reply, into cmds, and returns those that are to go alone: all
// of them when Redis refused the run as a whole (it ran none: out of
// memory, say), else those that found a key of theirs on another node (a
// slot on the move), and those read undeclared whose reply a missing key
// would give (see slotKeys).
func split(run *redis.Cmd, w wire, cmds []*redis.Cmd) (alone []int) {
	parts := w.parts
	replies, err := run.Slice()
	if isReply(err) && err != redis.Nil {
		return parts
	}
	if err == nil {
		replies, err = w.form.unpack(replies, len(parts))
	}
	for j, i := range parts {
		if err != nil {
			cmds[i] = redis.NewCmdResult(nil, err)
			continue
		}
		cmds[i] = replyCmd(replies[j])
		err := cmds[i].Err()
		if err != nil && strings.Contains(err.Error(), "non local key") ||
			w.undeclared != nil && w.undeclared[j] && w.form.unsure != nil && w.form.unsure(replies[j]) {
			alone = append(alone, i)
		}
	}
	return alone
}

// replyCmd is the command a call sent alone would have given for v, its
// place in a batched run's reply: a call that failed there has
// {'dlock:error', message}.
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
