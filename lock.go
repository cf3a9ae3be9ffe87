package dlock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
)

// kind is a kind of lock. Its value keeps the lock's keys apart from the
// other kinds of the same name and is what Status.Kind reports; String
// names it in messages.
type kind string

// The kinds of lock, in the order Inspect reports them.
const (
	kindMutex kind = keys.KindMutex
	kindFair  kind = keys.KindFair
	kindRW    kind = keys.KindRW
	kindSet   kind = keys.KindSet
	kindSem   kind = keys.KindSem
	kindElect kind = keys.KindElect
)

var kinds = []kind{kindMutex, kindFair, kindRW, kindSet, kindSem, kindElect}

// String returns the kind as messages name it: "mutex", "fair mutex",
// "rw mutex", "mutex set", "semaphore" or "election".
func (k kind) String() string {
	switch k {
	case kindFair:
		return "fair mutex"
	case kindRW:
		return "rw mutex"
	case kindSet:
		return "mutex set"
	}
	return string(k)
}

// lock is what every primitive is made of: its client, kind, name,
// options and keys, and the error of a bad name or option, which every
// call returns instead of touching Redis.
type lock struct {
	c    *Client
	kind kind
	name string
	cfg  lockConfig
	keys keys.Lock
	// kl is the KEYS the kind's scripts are sent. On a Client whose Redis
	// is one server (a *redis.Client: a single node, or a Sentinel-managed
	// master) it is the main key alone, from which the scripts name the
	// others as keys.Lock.Part does (see loadNaming): each key sent costs
	// Redis more to read than one named, and a handle keeps no more
	// strings than it sends. Elsewhere it is every key, the main key and
	// then the parts the kind was made with, in that order: on a Cluster,
	// declared, so that Redis refuses a script while a key of its slot is
	// on the move rather than let it read that key as missing (see
	// slotKeys); on a Redlock client, for its nodes' shares.
	kl  []string
	err error
}

// wakeArg is how a release or a leave is told to hand the lock on, with
// starve the kind's starve_us: "<starve_us> <publish> <channel>", one
// argument that Redis reads only when somebody waits (see wake_args in
// lua/lib/waiters.lua); made at each call rather than kept, so that a
// lock handle stays small.
func (l *lock) wakeArg(starve string) string {
	return starve + " " + l.c.hub.PublishCommand() + " " + l.keys.Channel()
}

// newLock checks name and opts for a lock of kind k on c, whose scripts
// take the main key and then parts as their KEYS.
func newLock(c *Client, k kind, name string, opts []LockOption, parts ...string) lock {
	l := lock{c: c, kind: k, name: name, cfg: newLockConfig(opts)}
	l.keys, l.err = c.lockKeys(k, name)
	if l.err == nil {
		l.err = l.cfg.err
	}
	if _, one := c.rdb.(*redis.Client); one {
		parts = nil
	}
	l.kl = make([]string, 1, 1+len(parts))
	l.kl[0] = l.keys.Key()
	for _, p := range parts {
		l.kl = append(l.kl, l.keys.Part(p))
	}
	return l
}

// run sends one of the lock's scripts; callers bound it (see bounded).
func (l *lock) run(ctx context.Context, s *redis.Script, args ...any) *redis.Cmd {
	return s.Run(ctx, l.c.scripter(ctx), l.kl, args...)
}

// runOnce is run for a script that must not run twice unseen (see once).
func (l *lock) runOnce(ctx context.Context, s *redis.Script, args ...any) *redis.Cmd {
	return s.Run(ctx, l.c.scripterOnce(ctx), l.kl, args...)
}

// eval runs one of the lock's scripts for a public call that does op
// ("status of"), returning by ctx's end and naming the lock in errors.
func (l *lock) eval(ctx context.Context, op string, s *redis.Script, args ...any) (any, error) {
	if l.err != nil {
		return nil, l.err
	}
	v, err := eval(ctx, l.c, s, (*redis.Cmd).Result, l.kl, args...)
	if err != nil {
		return nil, l.fail(op, err)
	}
	return v, nil
}

// evalSlice is eval for scripts that reply with a list of at least n
// items.
func (l *lock) evalSlice(ctx context.Context, op string, s *redis.Script, n int, args ...any) ([]any, error) {
	v, err := l.eval(ctx, op, s, args...)
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok || len(list) < n {
		return nil, l.fail(op, fmt.Errorf("%w %v", errBadReply, v))
	}
	return list, nil
}

// fail names the lock and what was done to it in an error.
func (l *lock) fail(op string, err error) error {
	return fmt.Errorf("dlock: %s %s %q: %w", op, l.kind, l.name, err)
}

// acquisition starts describing a call's taking of the lock by by, whose
// releases are announced on channel; a caller of a queuer that will wait
// (block) joins its queue. The primitive adds the call's values.
func (l *lock) acquisition(by taker, channel string, block bool) *acquisition {
	a := &acquisition{lock: l, by: by, what: l.kind.String(), name: l.name, channel: channel, join: joinNever, err: l.err}
	if _, ok := by.(queuer); ok && block {
		a.join = joinQueue
	}
	return a
}
