package dlock

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/notify"
	"github.com/go-dlock/dlock/internal/watchdog"
)

// NewRedlock returns a Client whose Mutex is held on a majority of the
// independent Redis masters rdbs (the Redlock algorithm), so that it
// survives the loss of a minority of them. Give it an odd number of
// masters, 3 or 5, that share no data (not replicas of one another),
// each client of its own server: one client given twice is ErrInvalid,
// but two clients of one server (one address twice in a list) cannot be
// told apart (a Sentinel client's address is a placeholder, and a
// Dialer may ignore it), and would count that server twice.
//
// A Lock asks every node at once, each within a timeout of a twentieth of
// the TTL (at most a second), and holds the lock only if a majority
// granted it while the lease still has time left: its validity is the TTL
// less the time the votes took and an allowance for clock drift (1% of
// the TTL plus 2ms). Otherwise it releases what it got on every node at
// once. Renewal and Unlock act on every node and need a majority; a
// renewal that cannot get one before the lease's validity ends closes
// Lost(). A node that fails is left alone for a while (50ms, doubling up
// to 2s while it keeps failing) rather than asked again on every try.
// Waiters are woken by a release on any node, and by themselves when the
// holder's lease runs out.
//
// Fences: each node issues max(last + 1, its clock in µs) and a lease's
// fence is the highest of its majority's. Unlock raises every node's last
// fence to the lease's, and any two majorities share a node, so a fence is
// above that of every lease released before it, unless the node they
// share lost its data. After a lease that expired without Unlock, or a
// node's restart, fences still follow the nodes' clocks, but rise
// strictly only if those clocks agree to within the time between the two
// acquisitions. Use the fence at the protected resource as for one Redis
// (see the README's GUARANTEES), knowing this limit.
//
// Only Mutex is offered: FairMutex, RWMutex and MutexSet return
// ErrUnsupported from every method, as do Inspect, List and ForceUnlock.
// Leases must expire: WithNoExpiry is ErrInvalid, and so are no masters,
// a nil one, or one client given twice (one Redis would count as two).
// Close leaves rdbs open.
func NewRedlock(rdbs []redis.UniversalClient, opts ...Option) *Client {
	cfg := newClientConfig(opts)
	c := newClient(cfg)
	if len(rdbs) == 0 {
		c.err = fmt.Errorf("%w: Redlock needs at least one Redis master", ErrInvalid)
		return c
	}
	hubs := make([]*notify.Hub, len(rdbs))
	seen := make(map[redis.UniversalClient]int, len(rdbs))
	for i, rdb := range rdbs {
		if rdb == nil {
			c.err = fmt.Errorf("%w: Redis master %d of %d is nil", ErrInvalid, i+1, len(rdbs))
			return c
		}
		// One Redis counted twice would make a majority of fewer servers.
		if j, dup := seen[rdb]; dup {
			c.err = fmt.Errorf("%w: Redis master %d of %d is master %d again", ErrInvalid, i+1, len(rdbs), j+1)
			return c
		}
		seen[rdb] = i
		hubs[i] = notify.New(rdb, cfg.log)
		c.nodes = append(c.nodes, &node{rdb: rdb, hub: hubs[i]})
	}
	c.listen = &fanIn{hubs: hubs, need: len(rdbs) - quorum(len(rdbs)) + 1}
	return c
}

// quorum is the number of nodes, out of n, that make a majority.
func quorum(n int) int { return n/2 + 1 }

// nodeTimeout is how long one node may take to answer a Redlock operation
// on a lease of ttl: a small part of the TTL, so that a slow or paused
// node costs a fraction of the lease, never the whole.
func nodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/20, 2*time.Millisecond), time.Second)
}

// clockDrift is Redlock's allowance for the nodes' clocks running faster
// than the holder's over ttl.
func clockDrift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// redlockMinTTL is the shortest lease a Redlock client accepts.
const redlockMinTTL = 10 * time.Millisecond

// splitPause is the longest random pause before trying again after a
// split vote, when no lease holds a majority: callers that collided then
// try again at different times.
const splitPause = 20 * time.Millisecond

// redlockMutex is a Mutex on a Redlock client.
// Its keys are those of the Mutex on one deployment, on every node.
type redlockMutex struct{ lock }

func newRedlockMutex(q *queued) *redlockMutex {
	r := &redlockMutex{q.lock}
	switch {
	case r.err != nil:
	case r.cfg.ttl == 0:
		r.err = fmt.Errorf("%w: a Redlock lease must expire (WithNoExpiry)", ErrInvalid)
	case r.cfg.ttl < redlockMinTTL:
		// Below it, the margin and the drift allowance leave no validity.
		r.err = fmt.Errorf("%w: TTL %v is below Redlock's minimum %v", ErrInvalid, r.cfg.ttl, redlockMinTTL)
	}
	return r
}

func (r *redlockMutex) acquire(ctx context.Context, block bool) (*Lease, error) {
	return r.c.acquire(ctx, r.acquisition(r, r.keys.Channel(), block), block)
}

func (r *redlockMutex) tryAlone(ctx context.Context, a *acquisition, tok string) (attempt, error) {
	a.tries++
	return r.try(ctx, tok, int(a.tries))
}

func (r *redlockMutex) granted(_ *acquisition, t attempt) leaseOps {
	n := len(r.c.nodes)
	return &redlockLease{r: r, fence: t.fence, asked: t.asked,
		released: make([]bool, n), nodes: make([]releaseRecord, n)}
}

// leave gives up a caller, who may hold a share whose reply it missed, on
// any node.
func (r *redlockMutex) leave(ctx context.Context, _ *acquisition, tok string) error {
	return firstErr(r.release(ctx, tok, 0, r.everyNode(), true, nil, 0))
}

// try, the k-th of its acquisition, asks every node for the lock and
// keeps it if a majority granted it in time; otherwise it gives back what
// it got and says how long to wait. Every try of an acquisition uses its
// token, so that a try sent again after a lost reply, or a later one,
// takes up the share an earlier try left; a share names the last try
// that took it up, and a try's give-back leaves a share a later try took
// up: arriving late (held back in the network), it must not take a
// share from the lease a later try got.
func (r *redlockMutex) try(ctx context.Context, tok string, k int) (attempt, error) {
	start := time.Now()
	v := r.ask(ctx, tok, k)
	n, q := len(r.c.nodes), quorum(len(r.c.nodes))
	valid := watchdog.Deadline(start, r.cfg.ttl).Add(-clockDrift(r.cfg.ttl))
	if v.granted >= q && time.Now().Before(valid) {
		return attempt{ok: true, fence: v.fence, asked: either(v.grants, v.silent)}, nil
	}
	if err := ctx.Err(); err != nil {
		// The caller gives up, and with it what this try may have got
		// (see giveUp), without holding the caller past its deadline.
		return attempt{}, err
	}
	var left []bool // where a share may be left: giving it back failed
	// Another lease's majority, perhaps with nodes that did not answer,
	// stays whatever this try gives back: announcing the give-back would
	// only wake waiters (this one first) to try, and give back, again, for
	// as long as it holds.
	announce := !v.mayHoldMajority(q)
	if v.granted > 0 {
		select {
		case ok := <-r.giveBack(ctx, tok, k, v.grants, announce):
			if !ok {
				left = v.grants
			}
		case <-ctx.Done():
			left = v.grants // not answered by the caller's deadline
		}
	}
	if v.silent != nil {
		// The nodes that never answered are given back to without
		// waiting: one that is paused would cost the caller a second
		// node timeout. They may still hold a share: left.
		left = either(left, v.silent)
		r.giveBack(ctx, tok, k, v.silent, announce)
	}
	if len(v.failed) > n-q {
		// The nodes that may hold a share go with the error, for the
		// lease that a later try may take, or the give-up, to release.
		return attempt{asked: left}, fmt.Errorf("%d of %d Redis masters failed, a majority of %d must answer: %w",
			len(v.failed), n, q, v.failed[0])
	}
	a := v.wait(q)
	a.asked = left
	return a, nil
}

// vote is what the nodes answered one try.
type vote struct {
	granted int
	fence   uint64                     // the highest fence granted
	failed  []error                    // the nodes that did not answer
	held    map[uint64][]time.Duration // holder id -> its shares' time left
	// The nodes that may hold a share now: those that granted it, and
	// those asked whose answer never came (nil if none).
	grants, silent []bool
}

// ask sends tok's k-th try to every node at once and counts the answers.
func (r *redlockMutex) ask(ctx context.Context, tok string, k int) vote {
	ttl := r.cfg.ttl
	id := leaseID(tok) + "." + strconv.Itoa(k)
	replies := fanOut(ctx, r.c.nodes, nodeTimeout(ttl), func(ctx context.Context, n *node) ([]any, error) {
		return redlockAcquire.Run(ctx, n.rdb, r.shareKeys(), tok, millis(ttl), r.cfg.metadata, id).Slice()
	})
	v := vote{held: map[uint64][]time.Duration{}, grants: make([]bool, len(replies))}
	for i, rp := range replies {
		if rp.err != nil {
			v.failed = append(v.failed, rp.err)
			if rp.err != errNodeResting {
				if v.silent == nil {
					v.silent = make([]bool, len(replies))
				}
				v.silent[i] = true
			}
			continue
		}
		switch a := rp.val; {
		case len(a) >= 2 && toInt(a[0]) == 1:
			v.granted++
			v.grants[i] = true
			v.fence = max(v.fence, uint64(toInt(a[1])))
		case len(a) >= 4:
			holder, _ := strconv.ParseUint(idOf(fmt.Sprint(a[3])), 10, 64)
			v.held[holder] = append(v.held[holder], ttlOf(toInt(a[1])))
		default:
			v.failed = append(v.failed, fmt.Errorf("%w %v", errBadReply, a))
		}
	}
	return v
}

// mayHoldMajority reports whether another lease may hold q nodes: it
// held so many of those that answered that, with those that did not, it
// makes q.
func (v vote) mayHoldMajority(q int) bool {
	for _, left := range v.held {
		if len(left)+len(v.failed) >= q {
			return true
		}
	}
	return false
}

// wait is the attempt of a vote that did not take the lock: how long
// until it is worth trying again unwoken, and who holds it, for a quorum
// of q.
func (v vote) wait(q int) attempt {
	// The lease holding the most nodes holds the lock if that is a majority.
	var holder uint64
	var left []time.Duration
	for id, l := range v.held {
		if len(l) > len(left) {
			holder, left = id, l
		}
	}
	slices.Sort(left)
	switch {
	case len(left) >= q:
		// The lock can be had once so many of the holder's shares ran out
		// that the rest are no majority.
		return attempt{wait: left[len(left)-q], holder: holder}
	case len(left) > 0 && len(left)+len(v.failed) >= q:
		// The holder may have a majority with nodes that did not answer:
		// wait for its release (which wakes us) or its first share to run
		// out, not the split-vote pause, which would poll the free nodes.
		return attempt{wait: left[0], holder: holder}
	}
	// No lease has a majority: callers split the vote, or one was granted
	// too late. Try again after a random pause, so that those who collided
	// try at different times.
	return attempt{wait: rand.N(splitPause)}
}

// giveBack gives back, in the background, the shares the k-th try of tok
// got on the nodes marked in asked, but those a later try took up, with
// a deadline of its own (the caller's context may end first); announce
// is release's. The channel it returns tells whether every node
// answered.
func (r *redlockMutex) giveBack(ctx context.Context, tok string, k int, asked []bool, announce bool) <-chan bool {
	done := make(chan bool, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeTimeout(r.cfg.ttl))
		defer cancel()
		done <- firstErr(r.release(ctx, tok, 0, asked, announce, nil, k)) == nil
	}()
	return done
}

// shareKeys are the KEYS of the redlock scripts: the owner key and the
// last fence, the first two of the Mutex's keys (the rest serve Status).
func (r *redlockMutex) shareKeys() []string { return r.kl[:2] }

// owner is the lock's owner key on node n.
func (r *redlockMutex) owner(n *node) owner { return owner{rdb: n.rdb, key: r.keys.Key()} }

// everyNode marks every node of the client.
func (r *redlockMutex) everyNode() []bool {
	all := make([]bool, len(r.c.nodes))
	for i := range all {
		all[i] = true
	}
	return all
}

// release gives back tok's share on the nodes marked in asked, resting or
// not: those that may hold one; only a share no try after the k-th took
// up, for k > 0 (a try's give-back). A node where a share was given back
// wakes a waiter of each client when announce is set. Each node's
// request, when l is not nil, is recorded in l.nodes (see
// releaseRecord), also one the caller stopped waiting for.
func (r *redlockMutex) release(ctx context.Context, tok string, fence uint64, asked []bool, announce bool, l *redlockLease, k int) []reply[bool] {
	return fanOutTo(ctx, r.c.nodes, asked, nodeTimeout(r.cfg.ttl), func(ctx context.Context, n *node) (bool, error) {
		publish := ""
		if announce {
			publish = n.hub.PublishCommand()
		}
		send := func() (bool, error) {
			// Sent once: go-redis sending it again after a lost reply
			// would find the share gone and count the node as not
			// released.
			args := []any{tok, fence, publish, r.keys.Channel()}
			if k > 0 {
				args = append(args, k)
			}
			return redlockRelease.Run(ctx, once{n.rdb}, r.shareKeys(), args...).Bool()
		}
		if l == nil {
			return send()
		}
		return l.nodes[slices.Index(r.c.nodes, n)].send(ctx, send)
	})
}

// Status combines every node's view: held when a majority of the nodes
// have the same lease (its shares carry one id); the holder's metadata
// and Since are that lease's, its TTL the shortest of its shares' and its
// fence the highest. A share another lease left on a node (its release
// did not reach it) does not count, nor show.
func (r *redlockMutex) Status(ctx context.Context) (Status, error) {
	if r.err != nil {
		return Status{}, r.err
	}
	replies := fanOut(ctx, r.c.nodes, nodeTimeout(r.cfg.ttl), func(ctx context.Context, n *node) ([]any, error) {
		return redlockStatus.Run(ctx, n.rdb, r.shareKeys()).Slice()
	})
	n, q := len(r.c.nodes), quorum(len(r.c.nodes))
	st := Status{Name: r.name, Kind: string(r.kind)}
	var answered int
	var failed error
	shares := map[string][]Status{} // the held shares, by lease id
	for _, rp := range replies {
		if rp.err == nil && len(rp.val) < 6 {
			rp.err = fmt.Errorf("%w %v", errBadReply, rp.val)
		}
		if rp.err != nil {
			failed = rp.err
			continue
		}
		answered++
		s := ownerStatus(r.name, r.kind, rp.val)
		st.Fence = max(st.Fence, s.Fence)
		if s.Held {
			id, _ := rp.val[5].(string)
			shares[idOf(id)] = append(shares[idOf(id)], s)
		}
	}
	if answered < q {
		return Status{}, fmt.Errorf("dlock: status of mutex %q: %d of %d Redis masters answered, a majority of %d must: %w",
			r.name, answered, n, q, failed)
	}
	for _, ss := range shares {
		if len(ss) < q {
			continue
		}
		st.Held, st.Fence = true, 0
		for i, s := range ss {
			if i == 0 || s.TTL < st.TTL {
				st.TTL = s.TTL
			}
			st.Fence = max(st.Fence, s.Fence)
		}
		st.Metadata, st.Since = ss[0].Metadata, ss[0].Since
	}
	return st, nil
}

// redlockLease is what a Redlock lease does to the nodes.
type redlockLease struct {
	r     *redlockMutex
	fence uint64
	// asked marks the nodes that may hold a share: Unlock releases there,
	// resting or not.
	asked []bool
	// released marks the nodes where a release took the lease's share,
	// so that an Unlock tried again counts them (Lease serialises Unlock).
	released []bool
	// nodes records, by node, whether a release may have run there (see
	// releaseRecord): a later release that finds the share gone there
	// counts it released.
	nodes []releaseRecord
	mu    sync.Mutex // serialises releases: Unlock's and the background one
}

var _ drifter = (*redlockLease)(nil)

func (l *redlockLease) drift(ttl time.Duration) time.Duration { return clockDrift(ttl) }

func (l *redlockLease) refresh(ctx context.Context, tok string, ttl time.Duration) (bool, error) {
	return tally(fanOut(ctx, l.r.c.nodes, nodeTimeout(ttl), func(ctx context.Context, n *node) (bool, error) {
		return l.r.owner(n).refresh(ctx, tok, ttl)
	}))
}

// release gives back the lease's share on every node. Once any share is
// gone the lease cannot be trusted to hold a majority: if fewer than a
// majority were released it is reported lost, never held.
func (l *redlockLease) release(ctx context.Context, tok string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	replies := l.r.release(ctx, tok, l.fence, l.asked, true, l, 0)
	some := false
	for i := range replies {
		if replies[i].err == nil && (replies[i].val || l.nodes[i].ran.Load()) {
			l.released[i] = true
		}
		if l.released[i] {
			replies[i] = reply[bool]{val: true}
			some = true
		}
	}
	ok, err := tally(replies)
	if err != nil && some {
		return false, errReleaseUnconfirmed
	}
	return ok, err
}

// errReleaseUnconfirmed is what a release returns along with false when
// it was made on some nodes but not confirmed by a majority: the lease is
// lost, for want of replies rather than because Redis said it was gone.
var errReleaseUnconfirmed = errors.New("released on fewer than a majority of the masters")

func (l *redlockLease) held(ctx context.Context, tok string) (bool, error) {
	return tally(fanOut(ctx, l.r.c.nodes, nodeTimeout(l.r.cfg.ttl), func(ctx context.Context, n *node) (bool, error) {
		return l.r.owner(n).held(ctx, tok)
	}))
}

// tally counts the nodes' yes/no answers: true when a majority said yes,
// false when a majority can no longer say yes, and an error when too many
// failed to tell.
func tally(replies []reply[bool]) (bool, error) {
	yes, failed := 0, 0
	var first error
	for _, rp := range replies {
		switch {
		case rp.err != nil:
			failed++
			if first == nil {
				first = rp.err
			}
		case rp.val:
			yes++
		}
	}
	q := quorum(len(replies))
	switch {
	case yes >= q:
		return true, nil
	case yes+failed < q:
		return false, nil
	}
	return false, fmt.Errorf("%d of %d Redis masters failed, a majority of %d must answer: %w",
		failed, len(replies), q, first)
}

// idOf is the lease id of a share's id, "<lease id>.<try>" (see ask).
func idOf(shareID string) string {
	id, _, _ := strings.Cut(shareID, ".")
	return id
}

// leaseID is a lease's public name, the same on every node: other callers
// count a holder's shares by it. It is derived from the token, which it
// does not reveal.
func leaseID(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return strconv.FormatUint(binary.BigEndian.Uint64(sum[:8]), 10)
}
