package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrNoLeader reports that nobody leads an Election now.
var ErrNoLeader = errors.New("dlock: no leader")

// Election elects one leader at a time among every client of the same
// Redis that campaigns under the same name, and lets anyone see and
// follow who leads: the leader's value (an address, a version) and its
// term.
//
// Leadership: campaigners queue in Redis and become leader in arrival
// order, as a FairMutex's waiters take the lock (a campaigner that dies
// is skipped after 3 seconds; one whose ctx ends leaves at once). The
// leadership is a Lease: it renews itself, Lost() closes the moment it
// is gone, and Do's fn sees its ctx cancelled with cause ErrLost. Its
// Fence is the term: it rises strictly with every new leader, so a
// resource that refuses writes with a term lower than one it has seen
// refuses an old leader that does not yet know it was replaced.
//
// Following: Leader reads who leads in one round trip. Observe follows
// every change: Redis announces a new term, a new value and a term that
// ends on the Election's channel, which every observer of a Client hears
// over the Client's one shared subscription; a leader that dies without
// a word is noticed when its lease runs out. Observers never poll.
//
// On a Redlock client every call fails with ErrUnsupported.
type Election struct{ *queued }

// Leadership is a term as leader of an Election: a Lease whose Fence is
// the term.
type Leadership struct{ *Lease }

// Leader is who leads an Election, as Leader and Observe report it. The
// zero Leader (Term 0) stands for nobody.
type Leader struct {
	Value string    // the leader's value, from Campaign or its last Proclaim
	Term  uint64    // the leadership lease's fence: rises with every new leader
	Since time.Time // when this term began, by Redis' clock
}

// Election returns the election called name. It is separate from the
// other locks of the same name. The options apply to the leaderships it
// hands out (WithTTL, WithAutoRefresh, WithMetadata, WithStallTimeout).
// A bad name or option does not panic: every call then fails with
// ErrInvalid.
func (c *Client) Election(name string, opts ...LockOption) *Election {
	q := c.queued(kindElect, name, opts)
	if q.err == nil {
		q.announce = []any{c.hub.PublishCommand(), q.keys.Channel()}
	}
	return &Election{q}
}

// Campaign waits its turn to lead, in arrival order, and returns the
// leadership once it leads, announcing value. It returns an error
// matching both ErrNotAcquired and ctx.Err() when ctx ends first, and one
// matching ErrNotAcquired when WithStallTimeout ran out; either way the
// caller gives up its place in the queue (once ctx has ended, in the
// background, a round trip later: a lock handed to it meanwhile goes on
// to the next).
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	return e.campaign(ctx, value, true)
}

// TryCampaign leads, announcing value, if nobody leads and nobody waits
// to, in one round trip. Otherwise it returns ErrNotAcquired and changes
// nothing.
func (e *Election) TryCampaign(ctx context.Context, value string) (*Leadership, error) {
	return e.campaign(ctx, value, false)
}

func (e *Election) campaign(ctx context.Context, value string, block bool) (*Leadership, error) {
	a := e.acquisition(block, leaderMeta(value, e.cfg.metadata))
	a.by = e
	l, err := e.c.acquire(ctx, a, block)
	if err != nil {
		return nil, err
	}
	return &Leadership{l}, nil
}

// granted makes a leadership's lease an Election's (see Resign and
// Proclaim); the rest of its taking is its queue's.
func (e *Election) granted(*acquisition, attempt) leaseOps { return e }

// Do campaigns as Campaign does, runs fn while it leads, and resigns.
// fn's context is cancelled, with cause ErrLost (see context.Cause), the
// moment the leadership is lost. Do returns fn's error joined with any
// error from resigning.
func (e *Election) Do(ctx context.Context, value string, fn func(ctx context.Context) error) error {
	campaign := func(ctx context.Context) (*Lease, error) {
		l, err := e.Campaign(ctx, value)
		if err != nil {
			return nil, err
		}
		return l.Lease, nil
	}
	return do(ctx, campaign, fn)
}

// Leader returns who leads now, in one round trip, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	ld, _, err := e.read(ctx)
	if err == nil && ld.Term == 0 {
		err = fmt.Errorf("%w: election %q", ErrNoLeader, e.name)
	}
	return ld, err
}

// read returns the leader (zero if none) and how long its lease has left
// (negative: it never expires).
func (e *Election) read(ctx context.Context) (Leader, time.Duration, error) {
	v, err := e.evalSlice(ctx, "leader of", electLeader, 5)
	if err != nil {
		return Leader{}, 0, err
	}
	st := ownerStatus(e.name, e.kind, v)
	if !st.Held {
		return Leader{}, 0, nil
	}
	value, _ := splitLeaderMeta(st.Metadata)
	return Leader{Value: value, Term: st.Fence, Since: st.Since}, st.TTL, nil
}

// Status reports, in one round trip, Kind "election": the leader's
// Value, Metadata, term (Fence), TTL and Since, and the campaigners
// waiting in queue order. Held is false while nobody leads.
func (e *Election) Status(ctx context.Context) (Status, error) {
	st, err := e.queued.Status(ctx)
	if err != nil {
		return Status{}, err
	}
	if st.Held {
		st.Value, st.Metadata = splitLeaderMeta(st.Metadata)
	}
	for i, w := range st.Waiters {
		_, st.Waiters[i].Metadata = splitLeaderMeta(w.Metadata)
	}
	return st, nil
}

// Proclaim changes the value the leader announces, within its term: Term
// and Since stay, and observers see the new value. It returns ErrLost,
// and closes Lost(), once the leadership is gone, and ErrLost after
// Resign (even one still going on in the background). A Leadership no
// Campaign returned is ErrInvalid.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	e, err := l.election()
	if err != nil {
		return err
	}
	if err := l.turn.take(ctx); err != nil {
		return fmt.Errorf("dlock: proclaim in election %q: %w", l.name, err)
	}
	defer l.turn.give()
	if l.released || l.releasing || l.later.Load() || l.isLost() {
		return fmt.Errorf("%w: no longer leader of election %q", ErrLost, l.name)
	}
	ok, err := bounded(ctx, e.c, func(ctx context.Context) (bool, error) {
		// Its owner key only: the queue's keys need not exist (see
		// sem_refresh.lua on a Cluster slot that moves).
		return electProclaim.Run(ctx, e.c.rdb, e.kl[:1], l.token, leaderMeta(value, e.cfg.metadata), e.c.hub.PublishCommand(), e.keys.Channel()).Bool()
	})
	switch {
	case err != nil:
		return fmt.Errorf("dlock: proclaim in election %q: %w", l.name, explain(err))
	case !ok:
		if l.wd != nil {
			l.wd.Stop() // nothing left to renew
		}
		l.markLost(LostGone)
		return fmt.Errorf("%w: no longer leader of election %q", ErrLost, l.name)
	}
	return nil
}

// Resign ends the term: it is Unlock, and the first campaigner waiting
// leads at once.
func (l *Leadership) Resign(ctx context.Context) error {
	if _, err := l.election(); err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// election returns the Election l leads, or ErrInvalid for a Leadership
// that no Campaign returned (nil, or the zero value).
func (l *Leadership) election() (*Election, error) {
	var e *Election
	if l != nil && l.Lease != nil {
		e, _ = l.ops.(*Election)
	}
	if e == nil {
		return nil, fmt.Errorf("%w: not a leadership of an Election", ErrInvalid)
	}
	return e, nil
}

// leaderMeta is what the owner key and a campaigner's queue entry hold
// for a leader: "<bytes of value>:<value><metadata>".
func leaderMeta(value, meta string) string {
	return strconv.Itoa(len(value)) + ":" + value + meta
}

// splitLeaderMeta splits what leaderMeta joined into the value and the
// metadata; what it cannot split is all metadata.
func splitLeaderMeta(s string) (value, meta string) {
	n, rest, ok := strings.Cut(s, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(rest) {
		return "", s
	}
	return rest[:size], rest[size:]
}

// Unlock is Resign's Lease.Unlock; a nil Leadership (a failed Campaign's,
// used unchecked) is ErrInvalid, as a nil Lease is.
func (l *Leadership) Unlock(ctx context.Context) error {
	if l == nil {
		return errNilLease
	}
	return l.Lease.Unlock(ctx)
}

// Refresh is Lease.Refresh; a nil Leadership is ErrInvalid.
func (l *Leadership) Refresh(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return errNilLease
	}
	return l.Lease.Refresh(ctx, ttl)
}

// Held is Lease.Held; a nil Leadership is ErrInvalid.
func (l *Leadership) Held(ctx context.Context) (bool, error) {
	if l == nil {
		return false, errNilLease
	}
	return l.Lease.Held(ctx)
}
