package dlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// owner is the key that records who holds an exclusive lock (Mutex,
// FairMutex, Election): one string "<tok> <fence> <since ms> <id> <meta>"
// expiring with the lease (lua/lib/owner.lua). It carries the lease
// operations they share.
type owner struct {
	rdb redis.UniversalClient
	key string
	// announce, for an Election, is the publish command and the channel
	// on which its scripts announce changes of holder, for those who
	// follow it (see Election.Observe): a lock taken, a lock left free,
	// a lease whose end comes nearer. nil for the other locks.
	announce []any
}

// renewal extends tok's lease to ttl. An Election's (which announces a
// lease brought nearer its end) goes alone, the others in lean batched
// runs (owner_renewals.lua).
func (o owner) renewal(tok string, ttl time.Duration) scriptCall {
	if o.announce != nil {
		return scriptCall{electRefresh, []string{o.key}, append([]any{tok, millis(ttl)}, o.announce...)}
	}
	return scriptCall{ownerRefresh, []string{o.key}, []any{tok, millis(ttl)}}
}

func (o owner) refresh(ctx context.Context, tok string, ttl time.Duration) (bool, error) {
	return o.renewal(tok, ttl).run(ctx, o.rdb).Bool()
}

func (o owner) held(ctx context.Context, tok string) (bool, error) {
	return ownerHeld.Run(ctx, o.rdb, []string{o.key}, tok).Bool()
}

// ownerStatus reads the first five fields of a status script's reply:
// {held, pttl, fence, metadata, since}.
func ownerStatus(name string, k kind, v []any) Status {
	st := Status{Name: name, Kind: string(k), Held: toInt(v[0]) == 1, Fence: uint64(toInt(v[2]))}
	if st.Held {
		st.TTL = ttlOf(toInt(v[1]))
		st.Metadata, _ = v[3].(string)
		st.Since = time.UnixMilli(toInt(v[4]))
	}
	return st
}

// waitersOf reads a status script's list of waiters: flat {metadata,
// arrived at (server ms)} pairs, first first.
func waitersOf(v any) []Waiter {
	w, _ := v.([]any)
	var out []Waiter
	for i := 0; i+1 < len(w); i += 2 {
		meta, _ := w[i].(string)
		out = append(out, Waiter{Metadata: meta, Since: time.UnixMilli(toInt(w[i+1])), Permits: 1})
	}
	return out
}

// parseAttempt reads a try script's reply: the fence (> 0) when taken,
// {fence} when the token held the lock already (see attempt.again), else
// {0, ttl, holder [, server µs]}. A taken lock replies its fence bare,
// because a table reply costs Redis 7.0 several times more to send, and
// as the decimal string the script made it, because reading it into a
// number would cost Redis about what a command does. (An integer fence
// is read too: no try script replies one now.)
func parseAttempt(reply any, err error) (attempt, error) {
	if err != nil {
		return attempt{}, err
	}
	if v, _ := reply.([]any); len(v) == 1 {
		r, err := parseAttempt(v[0], nil)
		return heldAgain(r, err, reply)
	}
	switch r := reply.(type) {
	case int64:
		if r > 0 {
			return attempt{ok: true, fence: uint64(r)}, nil
		}
	case string:
		if fence, err := strconv.ParseUint(r, 10, 64); err == nil && fence > 0 {
			return attempt{ok: true, fence: fence}, nil
		}
		return attempt{}, fmt.Errorf("%w %q", errBadReply, r)
	}
	v, _ := reply.([]any)
	if len(v) >= 3 {
		r := attempt{wait: ttlOf(toInt(v[1])), holder: uint64(toInt(v[2]))}
		if len(v) >= 4 {
			r.at = toInt(v[3])
		}
		return r, nil
	}
	return attempt{}, fmt.Errorf("%w %v", errBadReply, reply)
}

// heldAgain marks r, read from a try's reply {taken} (see parseAttempt),
// as a lease its token held already; err is the reading's error.
func heldAgain(r attempt, err error, reply any) (attempt, error) {
	switch {
	case err != nil:
		return attempt{}, err
	case !r.ok:
		return attempt{}, fmt.Errorf("%w %v", errBadReply, reply)
	}
	r.again = true
	return r, nil
}

// errBadReply reports a script reply dlock cannot read: a defect, or
// something other than dlock writing to its keys.
var errBadReply = errors.New("dlock: unexpected script reply")

// millis converts a TTL to whole milliseconds for Redis, rounding up: the
// watchdog counts the exact TTL, so Redis must never keep less.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++ // rounded up, without the overflow d + 999,999ns has near MaxInt64
	}
	return ms
}

// ttlOf converts a PTTL reply in milliseconds; -1 (no expiry) stays -1,
// and one past what a Duration holds (a lease taken with the longest
// TTL) is the longest Duration.
func ttlOf(ms int64) time.Duration {
	switch {
	case ms < 0:
		return -1
	case ms > int64(math.MaxInt64/time.Millisecond):
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// toInt reads an integer reply, or a decimal one sent as a string (a
// fence or a server time that a script replies as it read or made it,
// such as a holder's fence in a refusal); anything else is 0.
func toInt(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}
