package dlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxPermits is the largest Semaphore size, and so the most permits one
// lease may hold: 2^53, the largest integer Redis' Lua counts exactly.
const MaxPermits = 1 << 53

// Semaphore is a counting semaphore shared by every client of the same
// Redis under the same name: at most size permits are held at once, by
// all clients together. It has the semantics of
// golang.org/x/sync/semaphore, plus leases: each Acquire of n permits
// returns one Lease, with its own TTL, renewal, Lost() and a fence that
// rises strictly per semaphore; a holder that dies gives its permits back
// when its lease runs out, with no help.
//
// Order: callers that wait queue in Redis in arrival order (FIFO), and a
// caller that asks for more permits than are free holds back everyone
// behind it, so that a large request is never starved by a stream of
// small ones. TryAcquire fails while anyone waits. A release, and a waiter
// that gives up, hand the freed permits to the waiters they now let
// through, in order, with the message that wakes each one, and wake no
// one else. Waiters that die are dropped after the liveness timeout of a
// FairMutex's (3 seconds); one whose ctx ends leaves the queue at once.
//
// Size: every caller states its own. An acquisition of n permits is
// admitted while the permits in use plus n are at most the caller's size
// (a waiter is granted under the size it waits with). To change the size
// of a semaphore, deploy the new size: callers with the old size and the
// new one can run side by side, each admitted under its own, and the
// semaphore has the new size once the last old caller is gone. While both
// run, at most the larger size is in use. (A shrink lets the permits held
// beyond it drain: nobody's lease is taken away.)
//
// Cost: every operation is one Lua script, one round trip, O(log n) in
// leases and waiters, plus O(k) for the k expired leases or dead waiters
// it drops on the way and the waiters it grants (at most 100 of each).
type Semaphore struct {
	lock
	size int64
	// held is the keys a held lease keeps, all a renewal names (see
	// sem_refresh.lua).
	held []string
}

// Semaphore returns the semaphore called name, whose caller admits at
// most size permits in use at once. It is separate from the other locks
// of the same name. The options apply to the leases it hands out. A size
// below 1 or above MaxPermits, a bad name or a bad option does not panic:
// every call of the Semaphore then fails with ErrInvalid.
func (c *Client) Semaphore(name string, size int64, opts ...LockOption) *Semaphore {
	s := c.semaphore(name, size, opts)
	if s.err == nil && (size < 1 || size > MaxPermits) {
		s.err = fmt.Errorf("%w: semaphore %q: size %d, want 1 to %d", ErrInvalid, name, size, int64(MaxPermits))
	}
	return s
}

// semParts are the keys of a Semaphore besides its main hash, in the
// order of its scripts' KEYS (see sem_acquire.lua): the last fence, the
// leases, and the waiters' queue, liveness and metadata.
var semParts = []string{"fence", "leases", "queue", "alive", "wmeta"}

// semaphore returns the semaphore called name with the given size,
// unchecked.
func (c *Client) semaphore(name string, size int64, opts []LockOption) *Semaphore {
	l := newLock(c, kindSem, name, opts, semParts...)
	return &Semaphore{lock: l, size: size, held: []string{l.keys.Key(), l.keys.Part("leases")}}
}

// TryAcquire takes n permits if they are free and nobody waits, in one
// round trip. Otherwise it returns ErrNotAcquired and takes nothing (on
// its way it drops leases that ran out and dead waiters, and grants
// waiters whose permits now fit, as every call does). n below 1 or above
// the size is ErrInvalid.
func (s *Semaphore) TryAcquire(ctx context.Context, n int64) (*Lease, error) {
	return s.c.acquire(ctx, s.acquisition(n, false), false)
}

// Acquire takes n permits, waiting its turn in the queue until they are
// free. It returns an error matching both ErrNotAcquired and ctx.Err()
// when ctx ends first, and one matching ErrNotAcquired when
// WithStallTimeout ran out (no permits were acquired by anyone for that
// long); either way it gives up its place in the queue (once ctx has
// ended, in the background, a round trip later), and the waiters it held
// back go on. n below 1 or above the size is ErrInvalid.
func (s *Semaphore) Acquire(ctx context.Context, n int64) (*Lease, error) {
	return s.c.acquire(ctx, s.acquisition(n, true), true)
}

// Do acquires n permits as Acquire does, runs fn, and releases them.
// fn's context is cancelled, with cause ErrLost (see context.Cause), the
// moment the lease is lost. Do returns fn's error joined with any error
// from the release.
func (s *Semaphore) Do(ctx context.Context, n int64, fn func(ctx context.Context) error) error {
	return do(ctx, func(ctx context.Context) (*Lease, error) { return s.Acquire(ctx, n) }, fn)
}

// Status reports, in one round trip, Kind "semaphore": Size (the
// caller's), InUse (the permits live leases hold), every live lease
// (Holders, oldest first, each with its Permits), the waiters in queue
// order (Waiters, each with the Permits it waits for), Held (InUse > 0),
// TTL (until the first lease runs out; -1 if none ever does) and Fence
// (the last fence issued, while Redis remembers it).
func (s *Semaphore) Status(ctx context.Context) (Status, error) {
	v, err := s.evalSlice(ctx, "status of", semStatus, 6)
	if err != nil {
		return Status{}, err
	}
	st := Status{
		Name:  s.name,
		Kind:  string(s.kind),
		InUse: toInt(v[0]),
		Size:  cmp.Or(s.size, toInt(v[1])),
		Fence: uint64(toInt(v[2])),
	}
	st.Held = st.InUse > 0
	if st.Held {
		st.TTL = ttlOf(toInt(v[3]))
	}
	ls, _ := v[4].([]any)
	for l := range slices.Chunk(ls, 5) {
		if len(l) < 5 {
			break
		}
		meta, _ := l[0].(string)
		st.Holders = append(st.Holders, Holder{
			Metadata: meta,
			TTL:      ttlOf(toInt(l[1])),
			Fence:    uint64(toInt(l[2])),
			Since:    time.UnixMilli(toInt(l[3])),
			Permits:  toInt(l[4]),
		})
	}
	slices.SortFunc(st.Holders, func(a, b Holder) int { return cmp.Compare(a.Fence, b.Fence) })
	st.Waiters = waitersOf(v[5])
	for i, w := range st.Waiters {
		st.Waiters[i].Permits, st.Waiters[i].Metadata = splitSemWaiter(w.Metadata)
	}
	return st, nil
}

// check reports a bad semaphore or request for n permits.
func (s *Semaphore) check(n int64) error {
	if s.err != nil {
		return s.err
	}
	if n < 1 || n > s.size {
		return fmt.Errorf("%w: %d permits of semaphore %q, want 1 to its size %d", ErrInvalid, n, s.name, s.size)
	}
	return nil
}

// acquisition describes taking n permits; a caller that will wait
// (block) joins the queue. Permits freed by a release are granted to the
// waiters in the same script (see grant_waiters in lua/lib/permits.lua),
// on each waiter's client's channel.
func (s *Semaphore) acquisition(n int64, block bool) *acquisition {
	a := s.lock.acquisition(s, s.keys.Channel(), block)
	a.n, a.err = n, s.check(n)
	return a
}

func (s *Semaphore) tryScript(a *acquisition, tok string, join int) scriptCall {
	return scriptCall{semAcquire, s.kl, []any{tok, millis(s.cfg.ttl), s.cfg.metadata, a.n, s.size,
		join, millis(queueLiveness), s.c.hub.PublishCommand(), s.keys.Channel()}}
}

func (s *Semaphore) parseTry(reply any, err error) (attempt, error) { return parseAttempt(reply, err) }

func (s *Semaphore) granted(*acquisition, attempt) leaseOps { return permits{s} }

func (s *Semaphore) leave(ctx context.Context, _ *acquisition, tok string) error {
	return s.handOver(ctx, semLeave, tok).Err()
}

// handOver runs a script that lets tok's permits go and grants them on
// (sem_release, sem_leave), once (see once).
func (s *Semaphore) handOver(ctx context.Context, sc *redis.Script, tok string) *redis.Cmd {
	return s.runOnce(ctx, sc, tok, s.c.hub.PublishCommand(), s.keys.Channel())
}

func (s *Semaphore) holders() holders {
	return holders{keys: []string{s.keys.Key(), s.keys.Part("leases")}, channels: []string{s.keys.Channel()}, queues: []string{s.keys.Part("queue")}}
}

// splitSemWaiter splits a Semaphore waiter's entry, "<permits>:<size>:<metadata>",
// into the permits and the metadata.
func splitSemWaiter(e string) (int64, string) {
	n, rest, _ := strings.Cut(e, ":")
	_, meta, ok := strings.Cut(rest, ":")
	permits, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil {
		return 0, e
	}
	return permits, meta
}

// permits carries the lease operations of a Semaphore's leases.
type permits struct{ s *Semaphore }

func (p permits) renewal(tok string, ttl time.Duration) scriptCall {
	return scriptCall{semRefresh, p.s.held, []any{tok, millis(ttl)}}
}

func (p permits) refresh(ctx context.Context, tok string, ttl time.Duration) (bool, error) {
	return p.renewal(tok, ttl).run(ctx, p.s.c.rdb).Bool()
}

// release frees the lease's permits and grants them to the waiters they
// let through (sem_release.lua).
func (p permits) release(ctx context.Context, tok string) (bool, error) {
	return p.s.handOver(ctx, semRelease, tok).Bool()
}

func (p permits) held(ctx context.Context, tok string) (bool, error) {
	return semHeld.Run(ctx, p.s.c.rdb, p.s.held, tok).Bool()
}
