package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
)

// setBatch is how many members one Add, Remove or Members script handles:
// enough to fill a set of a million members in a thousand round trips,
// few enough that no script keeps Redis busy for more than milliseconds.
const setBatch = 1000

// MutexSet is a pool of named members (devices, licences, accounts,
// shards), each an exclusive lock of its own. Acquire takes any free
// member, AcquireMember a named one; the Lease says which (Lease.Name) and
// carries a fence that rises strictly per member. A MutexSet value holds
// no state of its own; any number of goroutines may use one.
//
// Which member: Acquire takes the least recently used free member. Members
// never used come first (in name order), then the one whose last lease
// ended longest ago, by Redis' clock. That spreads wear over the pool and
// gives a member released a moment ago time before it is reused.
//
// Members are explicit: they stay in Redis until removed, like the data of
// a set, and the set's keys go once its last member is removed (its last
// fence a minute after it could matter, as a Mutex's), or, when the last
// members are held as they are removed, expire with their leases. A member
// whose lease expires is free again at once.
//
// Cost: acquiring any member, releasing, renewing and Status are O(log n)
// in the set's size (one Lua script each, one round trip), and with
// waiters O(w) for the first w (at most 100) looked at. A lease that
// runs out frees its member with no step to reclaim it. The first call
// on a set an older dlock kept converts it, in O(n) (see README, "How it
// works").
//
// Waiting: callers that wait queue in Redis in arrival order, each for
// the member it names or for any, and a release (or an Add) hands the
// member to the first waiter that would take it, with the message that
// wakes it, as a Mutex release does; a newcomer may take a free member
// ahead of that waiter only while it has waited under a millisecond.
// Waiters also wake by themselves when the lease they wait for would run
// out (for any member, the first lease in the set).
type MutexSet struct{ lock }

// MemberStatus describes one member of a MutexSet as Redis has it at one
// moment.
type MemberStatus struct {
	Name string // the member
	Held bool   // a lease holds it now
	// Metadata is the holder's WithMetadata text.
	Metadata string
	// TTL is the holder's remaining lease time; -1 if it never expires, 0
	// if the member is free.
	TTL time.Duration
	// Since is when the holder acquired the member, by Redis' clock; zero
	// if it is free.
	Since time.Time
	// Fence is the holder's fence, or when free the last fence issued for
	// the member (0 if it was never acquired).
	Fence uint64
	// Removing reports a member removed while held: nobody else can
	// acquire it, and it leaves the set when the holder's lease ends.
	Removing bool
}

// MutexSet returns the mutex set called name. It is separate from the
// other locks of the same name. The options apply to the leases it hands
// out. Invalid names or options do not panic: every call of the MutexSet
// then fails with ErrInvalid.
func (c *Client) MutexSet(name string, opts ...LockOption) *MutexSet {
	return &MutexSet{newLock(c, kindSet, name, opts, setParts...)}
}

// setParts are the keys of a MutexSet besides its pool, in the order of
// its scripts' KEYS: see lua/lib/set.lua.
var setParts = []string{"held", "removing", "last", "queue", "alive", "wmeta"}

// oldSetParts are the keys of a MutexSet in the layout of an older dlock
// that this one's lacks, in the order set_convert (lua/lib/set.lua) reads
// them after setParts.
var oldSetParts = []string{"free", "owner", "leases", "meta", "since", "fences"}

// layoutKeys are the KEYS of the scripts that convert a set in the older
// layout (setConvert, setAdd, setRemove): the set's and, on a Cluster,
// the older layout's other keys after them.
func (s *MutexSet) layoutKeys() []string {
	if len(s.kl) == 1 {
		return s.kl
	}
	out := slices.Clip(s.kl)
	for _, p := range oldSetParts {
		out = append(out, s.keys.Part(p))
	}
	return out
}

// converter is a primitive whose Redis layout changed: converted reports
// whether err says a script met the older layout, and if so converts it,
// so that the script may run again.
type converter interface {
	converted(ctx context.Context, err error) bool
}

// converted converts the set when err is Redis' WRONGTYPE, which a set
// script meets at its first read on a set in the older layout, before
// it writes anything (see lua/lib/set.lua), and reports whether it did.
func (s *MutexSet) converted(ctx context.Context, err error) bool {
	if !wrongType(err) {
		return false
	}
	_, cerr := s.convert(ctx)
	return cerr == nil
}

// wrongType reports whether err is Redis' WRONGTYPE.
func wrongType(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE")
}

// convert converts a set in the older layout (set_convert.lua).
func (s *MutexSet) convert(ctx context.Context) (any, error) {
	return setConvert.Run(ctx, s.c.rdb, s.layoutKeys()).Result()
}

// runSet is run for a set script, run again once the set is converted
// when it met the older layout (see converted); with once, as runOnce.
func (s *MutexSet) runSet(ctx context.Context, once bool, sc *redis.Script, args ...any) *redis.Cmd {
	run := s.run
	if once {
		run = s.runOnce
	}
	cmd := run(ctx, sc, args...)
	if s.converted(ctx, cmd.Err()) {
		cmd = run(ctx, sc, args...)
	}
	return cmd
}

// Add puts members into the set, free and never used, and wakes waiters
// for them. It is idempotent: a member already in the set keeps its state
// (a held member stays held by its lease, a free one keeps its place in
// the LRU order), and a member removed while held stays in the set. Member
// names are 1 to 4096 bytes; Add with no members, or any bad name, returns
// ErrInvalid and changes nothing. Members go in batches of a thousand, one
// atomic script each: if Add fails, earlier batches may have been added,
// and calling it again is safe.
func (s *MutexSet) Add(ctx context.Context, members ...string) error {
	if err := s.checkMembers(members); err != nil {
		return err
	}
	for batch := range slices.Chunk(members, setBatch) {
		args := make([]any, 0, 2+len(batch))
		args = append(args, s.c.hub.PublishCommand(), s.keys.Channel())
		for _, m := range batch {
			args = append(args, m)
		}
		if err := s.evalLayout(ctx, "add to", setAdd, args...); err != nil {
			return err
		}
	}
	return nil
}

// Remove takes members out of the set. A free member leaves at once. A
// held member is never taken from its holder: it can no longer be
// acquired (AcquireMember returns ErrNoMember, Acquire skips it), its
// lease goes on being renewed and released as usual, and it leaves the set
// when that lease is released or expires. Adding it back before then
// cancels the removal. So Remove never lets two leases hold one member,
// even when the member is added again at once. Names not in the set are
// ignored; no members, or a bad name, is ErrInvalid. Members go in batches
// as for Add: if Remove fails, earlier batches may have been removed.
//
// A member removed and added again gets fences above its old ones, also
// once the set was emptied, as long as a minute after they could still be
// ahead of Redis' clock (the set's highest fence is kept that long).
func (s *MutexSet) Remove(ctx context.Context, members ...string) error {
	if err := s.checkMembers(members); err != nil {
		return err
	}
	for batch := range slices.Chunk(members, setBatch) {
		args := make([]any, len(batch))
		for i, m := range batch {
			args[i] = m
		}
		if err := s.evalLayout(ctx, "remove from", setRemove, args...); err != nil {
			return err
		}
	}
	return nil
}

// evalLayout runs a script that converts a set in the older layout first
// (see layoutKeys) for a public call that does op, as eval does.
func (s *MutexSet) evalLayout(ctx context.Context, op string, sc *redis.Script, args ...any) error {
	_, err := eval(ctx, s.c, sc, (*redis.Cmd).Result, s.layoutKeys(), args...)
	if err != nil {
		return s.fail(op, err)
	}
	return nil
}

// evalSet is evalSlice for a script that may meet the older layout: it
// runs again once the set is converted (see converted), the conversion
// bounded by ctx as the script is.
func (s *MutexSet) evalSet(ctx context.Context, op string, sc *redis.Script, n int, args ...any) ([]any, error) {
	v, err := s.evalSlice(ctx, op, sc, n, args...)
	if !wrongType(err) {
		return v, err
	}
	if _, err := bounded(ctx, s.c, s.convert); err != nil {
		return nil, s.fail(op, err)
	}
	return s.evalSlice(ctx, op, sc, n, args...)
}

// TryAcquire takes the least recently used free member, in one round
// trip. If no member is free (but those that waiters ahead would take,
// one each), or the set has none, it returns ErrNotAcquired and changes
// nothing.
func (s *MutexSet) TryAcquire(ctx context.Context) (*Lease, error) {
	return s.c.acquire(ctx, s.acquisition("", false), false)
}

// Acquire takes the least recently used free member, waiting while none
// is: until a member is released or added, or the first lease in the set
// runs out. On an empty set it waits for an Add. It returns an error
// matching both ErrNotAcquired and ctx.Err() when ctx ends first, and one
// matching ErrNotAcquired when WithStallTimeout ran out (no member changed
// hands for that long); either way it leaves the set unchanged.
func (s *MutexSet) Acquire(ctx context.Context) (*Lease, error) {
	return s.c.acquire(ctx, s.acquisition("", true), true)
}

// TryAcquireMember takes the named member if it is free, in one round
// trip. It returns ErrNotAcquired if another lease holds it, and
// ErrNoMember if it is not in the set (or was removed while held); either
// way it changes nothing.
func (s *MutexSet) TryAcquireMember(ctx context.Context, member string) (*Lease, error) {
	return s.c.acquire(ctx, s.named(member, false), false)
}

// AcquireMember takes the named member, waiting while it is held: until it
// is released or its holder's lease runs out. It returns ErrNoMember at
// once if the member is not in the set, and as soon as it finds it
// removed while waiting. Otherwise it ends as Acquire does, leaving the set
// unchanged.
func (s *MutexSet) AcquireMember(ctx context.Context, member string) (*Lease, error) {
	return s.c.acquire(ctx, s.named(member, true), true)
}

// Do acquires any member as Acquire does, runs fn with it, and releases
// it. fn's context is cancelled, with cause ErrLost (see context.Cause),
// the moment the lease is lost. Do returns fn's error joined with any
// error from the release.
func (s *MutexSet) Do(ctx context.Context, fn func(ctx context.Context, member string) error) error {
	if fn == nil {
		return errNoFunc
	}
	var member string
	acquire := func(ctx context.Context) (*Lease, error) {
		l, err := s.Acquire(ctx)
		if err == nil {
			member = l.Name()
		}
		return l, err
	}
	return do(ctx, acquire, func(ctx context.Context) error { return fn(ctx, member) })
}

// Members lists every member in byte order of their names, with its
// holder if held. It reads about a thousand members per round trip, each
// page at one moment: a member added or removed during the listing may or
// may not appear, and one that changes hands shows as it was when its
// page was read. It costs O(n) in the set's size; Status is O(log n).
func (s *MutexSet) Members(ctx context.Context) ([]MemberStatus, error) {
	var out []MemberStatus
	cursor := "0"
	for {
		v, err := s.evalSet(ctx, "members of", setMembers, 2, cursor, setBatch)
		if err != nil {
			return nil, err
		}
		page, next, err := parseMembers(v)
		if err != nil {
			return nil, s.fail("members of", err)
		}
		out = append(out, page...)
		if next == "0" {
			break
		}
		cursor = next
	}
	// Pages come in the pool's order, and may repeat a member: the first
	// read of each stays.
	slices.SortStableFunc(out, func(a, b MemberStatus) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b MemberStatus) bool { return a.Name == b.Name }), nil
}

// Status summarises the set in one round trip, in O(log n): Kind "set";
// Members and Free count the members, and those free now; Held tells
// whether any member is held; TTL is the time until the first held lease
// runs out (-1 if none ever does, 0 if nothing is held), that is, when a
// member frees by itself at the latest; Fence is the highest fence issued
// in the set; Waiters are the callers queued for a member, first first.
// Metadata and Since stay empty: Members lists the holders.
func (s *MutexSet) Status(ctx context.Context) (Status, error) {
	v, err := s.evalSet(ctx, "status of", setStatus, 5)
	if err != nil {
		return Status{}, err
	}
	members, held := int(toInt(v[0])), int(toInt(v[1]))
	st := Status{
		Name:    s.name,
		Kind:    string(s.kind),
		Held:    held > 0,
		Fence:   uint64(toInt(v[3])),
		Members: members,
		Free:    members - held,
	}
	if st.Held {
		st.TTL = ttlOf(toInt(v[2]))
	}
	st.Waiters = waitersOf(v[4])
	for i, w := range st.Waiters {
		st.Waiters[i].Member, st.Waiters[i].Metadata = splitSetWaiter(w.Metadata)
	}
	return st, nil
}

// acquisition describes taking member, or any member when it is "".
// Waiters queue in Redis, each for the member it names or for any, and a
// release hands the member to the first waiter that would take it (see
// set_hand_over in lua/lib/set.lua). Waiters for any member listen on
// their client's channel of the set, waiters for a named one on the
// member's, where a removal of the member wakes them all. A caller that
// will wait (block) joins the queue.
func (s *MutexSet) acquisition(member string, block bool) *acquisition {
	a := s.lock.acquisition(s, s.keys.Channel(), block)
	a.member = member
	if member != "" {
		a.what = fmt.Sprintf("member of mutex set %q", s.name)
		a.name = member
		a.channel = s.keys.MemberChannel(member)
	}
	return a
}

func (s *MutexSet) tryScript(a *acquisition, tok string, join int) scriptCall {
	args := []any{tok, millis(s.cfg.ttl), mutexArgs.try[join]}
	if s.cfg.metadata != "" || a.member != "" {
		args = append(args, s.cfg.metadata) // sent only when there is some, or a member after it
	}
	if a.member != "" {
		args = append(args, a.member)
	}
	return scriptCall{setAcquire, s.kl, args}
}

func (s *MutexSet) parseTry(reply any, err error) (attempt, error) {
	return parseSetAttempt(reply, err)
}

func (s *MutexSet) granted(_ *acquisition, r attempt) leaseOps { return setMember{s, r.member} }

func (s *MutexSet) leave(ctx context.Context, _ *acquisition, tok string) error {
	return s.runSet(ctx, false, setLeave, tok, s.wakeArg(mutexArgs.starve)).Err()
}

// named describes taking member by name: a bad name is the call's error.
func (s *MutexSet) named(member string, block bool) *acquisition {
	a := s.acquisition(member, block)
	if err := s.checkMember(member); err != nil {
		a.err = err
	}
	return a
}

// parseSetAttempt reads set_acquire's reply: "<fence> <member>" when
// taken (a string: a table costs Redis 7.0 more to send), {"<fence>
// <member>"} when the token held it already (see attempt.again), {0,
// wait, holder, at}, or {-1} for a member not in the set.
func parseSetAttempt(reply any, err error) (attempt, error) {
	if err != nil {
		return attempt{}, err
	}
	if s, ok := reply.(string); ok {
		f, m, _ := strings.Cut(s, " ")
		fence, err := strconv.ParseUint(f, 10, 64)
		if err != nil || fence == 0 {
			return attempt{}, fmt.Errorf("%w %q", errBadReply, s)
		}
		return attempt{ok: true, fence: fence, member: m}, nil
	}
	if v, _ := reply.([]any); len(v) == 1 {
		if toInt(v[0]) == -1 {
			return attempt{}, ErrNoMember
		}
		r, err := parseSetAttempt(v[0], nil)
		return heldAgain(r, err, reply)
	}
	return parseAttempt(reply, nil)
}

// splitSetWaiter splits a MutexSet waiter's entry, "<n>:<member><metadata>"
// with the member n bytes long, into the member ("" for any) and metadata.
func splitSetWaiter(e string) (member, meta string) {
	n, rest, _ := strings.Cut(e, ":")
	k, err := strconv.Atoi(n)
	if err != nil || k < 0 || k > len(rest) {
		return "", e
	}
	return rest[:k], rest[k:]
}

// parseMembers reads set_members' reply: {next cursor, flat list of 7 per
// member}.
func parseMembers(v []any) ([]MemberStatus, string, error) {
	if len(v) < 2 {
		return nil, "", fmt.Errorf("%w %v", errBadReply, v)
	}
	next, _ := v[0].(string)
	flat, _ := v[1].([]any)
	if len(flat)%7 != 0 {
		return nil, "", fmt.Errorf("%w %v", errBadReply, v)
	}
	out := make([]MemberStatus, 0, len(flat)/7)
	for f := range slices.Chunk(flat, 7) {
		ms := MemberStatus{Fence: uint64(toInt(f[3])), Removing: toInt(f[6]) == 1}
		ms.Name, _ = f[0].(string)
		if toInt(f[1]) == 1 {
			ms.Held = true
			ms.TTL = ttlOf(toInt(f[2]))
			ms.Metadata, _ = f[4].(string)
			ms.Since = time.UnixMilli(toInt(f[5]))
		}
		out = append(out, ms)
	}
	return out, next, nil
}

func (s *MutexSet) checkMembers(members []string) error {
	if s.err != nil {
		return s.err
	}
	if len(members) == 0 {
		return fmt.Errorf("%w: no members given for mutex set %q", ErrInvalid, s.name)
	}
	for _, m := range members {
		if err := keys.CheckName(m); err != nil {
			return fmt.Errorf("%w: member of mutex set %q: %w", ErrInvalid, s.name, err)
		}
	}
	return nil
}

func (s *MutexSet) checkMember(member string) error {
	if s.err != nil {
		return s.err
	}
	if err := keys.CheckName(member); err != nil {
		return fmt.Errorf("%w: member of mutex set %q: %w", ErrInvalid, s.name, err)
	}
	return nil
}

// setField is member's field in a set's records (set_field in
// lua/lib/set.lua): its name, or a zero byte and the name for a name that
// starts with one.
func setField(member string) string {
	if member[0] == 0 {
		return "\x00" + member
	}
	return member
}

// setMember carries the lease operations of one member.
type setMember struct {
	s      *MutexSet
	member string
}

func (m setMember) renewal(tok string, ttl time.Duration) scriptCall {
	return scriptCall{setRefresh, m.s.kl, []any{tok, millis(ttl), m.member}}
}

func (m setMember) refresh(ctx context.Context, tok string, ttl time.Duration) (bool, error) {
	return m.renewal(tok, ttl).run(ctx, m.s.c.rdb).Bool()
}

// release frees the member, handing it to the first waiter that would
// take it (set_release.lua), once (see once). Members barge as a Mutex
// does (mutexStarve).
func (m setMember) release(ctx context.Context, tok string) (bool, error) {
	args := []any{tok, setField(m.member), m.s.wakeArg(mutexArgs.starve)}
	if m.member[0] == 0 {
		args = append(args, m.member) // its field is not its name
	}
	return m.s.runSet(ctx, true, setRelease, args...).Bool()
}

func (m setMember) held(ctx context.Context, tok string) (bool, error) {
	return m.s.runSet(ctx, false, setHeld, tok, m.member).Bool()
}
