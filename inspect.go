package dlock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
)

// inspectable is what operator tools need of every primitive.
type inspectable interface {
	Status(ctx context.Context) (Status, error)
	// holders returns what ForceUnlock removes and wakes.
	holders() holders
}

// holders is what frees a lock, and who must be told: the keys whose
// removal frees it, the release channels its waiters listen on, and its
// queues whose waiters hear their wake-ups on their clients' channels
// beside the first len(queues) of those channels (see
// keys.ClientChannel), one queue each, in order.
type holders struct {
	keys, channels, queues []string
}

// forceArgs returns the KEYS and ARGV of force_unlock.lua that remove
// h's holders, if the owner key holds what seen says (see seenHolder),
// and wake every waiter, with publish.
func (h holders) forceArgs(publish, seen string) ([]string, []any) {
	args := append([]any{publish, seen, len(h.keys)}, anys(h.channels)...)
	return append(slices.Clip(h.keys), h.queues...), args
}

// kindOf returns the lock of the given kind called name, or nil for an
// unknown kind.
func (c *Client) kindOf(k kind, name string) inspectable {
	switch k {
	case kindMutex, kindFair:
		return c.queued(k, name, nil)
	case kindRW:
		return c.RWMutex(name)
	case kindSet:
		return c.MutexSet(name)
	case kindSem:
		// Size 0: Status reports the size the latest acquisition asked
		// under.
		return c.semaphore(name, 0, nil)
	case kindElect:
		return c.Election(name)
	}
	return nil
}

// Inspect returns the status of every kind of lock called name (mutex,
// fair, rw, set, semaphore, election) that Redis has state for: held,
// waited for, remembering a fence, or having members. It returns none for a name no one has used
// lately.
func (c *Client) Inspect(ctx context.Context, name string) ([]Status, error) {
	if _, err := c.lockKeys(kindMutex, name); err != nil {
		return nil, err
	}
	if err := c.oneDeployment("Inspect"); err != nil {
		return nil, err
	}
	var out []Status
	for _, k := range kinds {
		st, err := c.kindOf(k, name).Status(ctx)
		if err != nil {
			return nil, err
		}
		if st.Held || st.Fence != 0 || len(st.Waiters) > 0 || len(st.Readers) > 0 || st.WriterWaiting || st.Members > 0 {
			out = append(out, st)
		}
	}
	return out, nil
}

// List returns the status of every lock under the client's prefix whose
// name matches pattern (path.Match syntax; "" matches all), sorted by name
// and kind. It walks the keyspace with SCAN, never KEYS, on every master
// of a cluster; locks that change meanwhile may be missed or seen twice,
// as SCAN allows.
func (c *Client) List(ctx context.Context, pattern string) ([]Status, error) {
	if c.err != nil {
		return nil, c.err
	}
	if err := c.oneDeployment("List"); err != nil {
		return nil, err
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("%w: pattern %q: %w", ErrInvalid, pattern, err)
	}
	type lock struct{ kind, name string }
	var mu sync.Mutex
	found := map[lock]bool{}
	scan := func(ctx context.Context, rdb redis.UniversalClient) error {
		it := rdb.Scan(ctx, 0, globEscaper.Replace(c.prefix)+":{*", 1000).Iterator()
		for it.Next(ctx) {
			kind, name, ok := keys.Parse(c.prefix, it.Val())
			if !ok {
				continue
			}
			if pattern != "" {
				if m, _ := path.Match(pattern, name); !m {
					continue
				}
			}
			mu.Lock()
			found[lock{kind, name}] = true
			mu.Unlock()
		}
		return it.Err()
	}
	_, err := bounded(ctx, c, func(ctx context.Context) (struct{}, error) {
		if cc, ok := c.rdb.(*redis.ClusterClient); ok {
			return struct{}{}, cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
		}
		return struct{}{}, scan(ctx, c.rdb)
	})
	if err != nil {
		return nil, fmt.Errorf("dlock: list: %w", err)
	}
	locks := slices.SortedFunc(func(yield func(lock) bool) {
		for l := range found {
			if !yield(l) {
				return
			}
		}
	}, func(a, b lock) int {
		if n := strings.Compare(a.name, b.name); n != 0 {
			return n
		}
		return strings.Compare(a.kind, b.kind)
	})
	var out []Status
	for _, l := range locks {
		p := c.kindOf(kind(l.kind), l.name)
		if p == nil {
			continue
		}
		st, err := p.Status(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// ForceUnlock removes the holders of every kind of lock called name,
// whoever they are, and wakes all its waiters: an operator's tool for a
// lock whose holder is gone but whose lease does not expire (WithNoExpiry)
// or is too long to wait for. Holders find out at their next renewal
// (Lost() closes). It returns the statuses of the locks it freed, as they
// were just before; a lock that changed hands between its look and the
// removal (another holder, or a writer where it saw readers alone) is
// left alone and not returned. That is checked on the exclusive holder
// only: read shares and Semaphore leases taken since the look are
// removed with the rest. MutexSet members are freed one at a time,
// with MutexSet.ForceRelease.
func (c *Client) ForceUnlock(ctx context.Context, name string) ([]Status, error) {
	before, err := c.Inspect(ctx, name)
	if err != nil {
		return nil, err
	}
	var freed []Status
	for _, st := range before {
		if !st.Held || kind(st.Kind) == kindSet {
			continue
		}
		ks, args := c.kindOf(kind(st.Kind), name).holders().forceArgs(c.hub.PublishCommand(), seenHolder(st))
		// Once (see once): run again unseen after a lost reply, it would
		// find the holder gone and report the lock not freed.
		n, err := bounded(ctx, c, func(ctx context.Context) (int64, error) {
			return forceUnlock.Run(ctx, once{c.rdb}, ks, args...).Int64()
		})
		if err != nil {
			return freed, fmt.Errorf("dlock: force unlock %s %q: %w", st.Kind, name, err)
		}
		if n >= 0 {
			freed = append(freed, st)
		}
	}
	return freed, nil
}

// globEscaper quotes the characters SCAN MATCH would read as a pattern.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// seenHolder is what force_unlock.lua's ARGV[2] expects of the owner key
// of a lock whose status st an operator saw, so that it removes the
// holder seen and not one that came since: the fence looked at; for an
// RWMutex held by readers alone, no owner key (its readers all go, a
// writer that came since stays); else anything.
func seenHolder(st Status) string {
	switch {
	case !st.Since.IsZero():
		return strconv.FormatUint(st.Fence, 10)
	case kind(st.Kind) == kindRW:
		return "none"
	}
	return ""
}

func (s *MutexSet) holders() holders {
	return holders{} // see ForceRelease
}

func (rw *RWMutex) holders() holders {
	return holders{
		keys:     []string{rw.keys.Key(), rw.keys.Part("readers"), rw.keys.Part("rexp"), rw.keys.Part("rmeta")},
		channels: []string{rw.writersChannel(), rw.readersChannel()},
		queues:   []string{rw.keys.Part("queue")},
	}
}

// ForceRelease frees member from whoever holds it, as its holder's Unlock
// would, and wakes a waiter: an operator's tool. The holder finds out at
// its next renewal. It returns the member's status just before; Held false
// means there was nothing to free. An unknown member is ErrNoMember.
func (s *MutexSet) ForceRelease(ctx context.Context, member string) (MemberStatus, error) {
	if err := s.checkMember(member); err != nil {
		return MemberStatus{}, err
	}
	members, err := s.Members(ctx)
	if err != nil {
		return MemberStatus{}, err
	}
	for _, ms := range members {
		if ms.Name != member {
			continue
		}
		if !ms.Held {
			return ms, nil
		}
		ok, err := bounded(ctx, s.c, func(ctx context.Context) (bool, error) { return s.releaseHolder(ctx, ms) })
		if err != nil {
			return ms, fmt.Errorf("dlock: force release %q of set %q: %w", member, s.name, err)
		}
		if !ok {
			// Released, or taken by someone else, since we looked.
			return MemberStatus{Name: member}, nil
		}
		return ms, nil
	}
	return MemberStatus{}, fmt.Errorf("%w: %q in set %q", ErrNoMember, member, s.name)
}

// releaseHolder releases the lease seen holding ms.Name, with ms.Fence,
// and reports whether it did: not when the member has changed hands
// since. Its record (see lua/lib/set.lua) names the token and fence of
// the member's last lease: a fence still the one seen means no lease was
// granted the member since it was seen, so the token read was the seen
// holder's (whose release then takes nothing from anyone else).
func (s *MutexSet) releaseHolder(ctx context.Context, ms MemberStatus) (bool, error) {
	r, err := s.c.rdb.HGet(ctx, s.keys.Part("held"), setField(ms.Name)).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	f := strings.Fields(r)
	if len(f) < 3 || f[2] != strconv.FormatUint(ms.Fence, 10) {
		return false, nil
	}
	return setMember{s, ms.Name}.release(ctx, f[0])
}
