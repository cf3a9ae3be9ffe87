package dlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// RWMutex is a reader/writer lock shared by every client of the same Redis
// under the same name: any number of readers, or one writer. Lock, TryLock
// and Do take the write side (so *RWMutex is a Locker); RLock and TryRLock
// take a read share, and RLocker returns the read side as a Locker.
//
// Every read share is a lease of its own, with its own token, fence,
// expiry, renewal and Lost(): a reader that dies frees its own share when
// its TTL runs out, and no other. Fences rise across both sides: a
// writer's fence is above every fence issued before it, readers' included.
//
// Whom it favours is chosen per caller by WithRWMode:
//
//   - PreferWriters (the default; redis-rwlock's ModePreferWriter):
//     a writer that has to wait registers an intention, and a reader that
//     uses PreferWriters does not start while an intention lives. Readers
//     that hold the lock finish, then the writer gets it, so a stream of
//     overlapping readers cannot starve a writer. In return a steady stream
//     of writers can starve PreferWriters readers.
//   - PreferReaders (redis-rwlock's ModePreferReader): a reader that uses it
//     ignores intentions and waits only while a writer holds the lock, and
//     a writer that uses it registers no intention. Writers then wait until
//     no reader holds the lock, which overlapping readers may put off for
//     ever.
//
// The mode is the calling side's own policy: a reader's mode says whether
// it gives way to waiting writers, a writer's whether it asks readers to.
// Give every user of one lock the same mode unless you mean to mix them.
// (redis-rwlock let writers always announce themselves and its readers
// choose.)
//
// Waiting writers queue in Redis as a Mutex's waiters do, and an
// intention lives as long as its writer's place in the line: the writer
// renews both every second, they lapse 3 seconds after the writer dies,
// and they are withdrawn when the writer gives up (its ctx ends), which
// wakes the readers it held back. As with sync.RWMutex, do not take a second read share while
// holding one under PreferWriters: a writer waiting in between blocks it,
// and the first share blocks the writer.
//
// Waiters are woken by Redis. A writer's release, and the last reader's,
// hands the lock to the first waiting writer with the message that wakes
// it, as Mutex does: writers go in arrival order, and a writer that
// arrives while the lock is free may take it ahead of the line only while
// the first writer has waited less than a millisecond. A writer's release
// that hands the lock to no writer wakes every waiting reader. Under
// PreferReaders the first writer is only woken, to try beside the readers.
type RWMutex struct {
	lock
	owner // the writer
	// share is the keys a read share's renewal touches, made once per
	// handle (a renewal runs every TTL/3 per share): the readers, their
	// expiries and details (rw_rrefresh.lua); Held reads the expiries.
	share []string
}

var _ Locker = (*RWMutex)(nil)

// rwParts are the keys of an RWMutex besides the writer's owner key, in
// the order of its scripts' KEYS: the last fence, the readers, their
// expiries and details, the writers' intentions, and the writers' queue,
// their liveness and metadata.
var rwParts = []string{"fence", "readers", "rexp", "rmeta", "intent", "queue", "alive", "wmeta"}

// RWMutex returns the reader/writer lock called name. It is a lock of its
// own, separate from the Mutex of the same name. Invalid names or options
// do not panic: every call of the RWMutex then fails with ErrInvalid.
func (c *Client) RWMutex(name string, opts ...LockOption) *RWMutex {
	rw := &RWMutex{lock: newLock(c, kindRW, name, opts, rwParts...)}
	rw.owner = owner{rdb: c.rdb, key: rw.keys.Key()}
	rw.share = []string{rw.keys.Part("readers"), rw.keys.Part("rexp"), rw.keys.Part("rmeta")}
	return rw
}

// TryLock takes the write side if no writer and no reader holds it, and
// no waiting writer comes first (one that has waited a millisecond or
// more, as with Mutex), in one round trip. Otherwise it returns
// ErrNotAcquired and changes nothing: it registers no intention.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return rw.c.acquire(ctx, rw.writer(false), false)
}

// Lock takes the write side, waiting while a writer or readers hold it;
// under PreferWriters it stops new readers while it waits. It returns an
// error matching both ErrNotAcquired and ctx.Err() when ctx ends first,
// and one matching ErrNotAcquired when WithStallTimeout ran out; either way
// it withdraws its intention and leaves the lock unchanged.
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return rw.c.acquire(ctx, rw.writer(true), true)
}

// Do takes the write side, runs fn, and unlocks, as Mutex.Do does.
func (rw *RWMutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return do(ctx, rw.Lock, fn)
}

// TryRLock takes a read share if no writer holds the lock and, under
// PreferWriters, no writer waits for it, in one round trip. Otherwise it
// returns ErrNotAcquired and changes nothing.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return rw.c.acquire(ctx, rw.reader(), false)
}

// RLock takes a read share, waiting while a writer holds the lock and,
// under PreferWriters, while a writer waits for it. It returns an error
// matching both ErrNotAcquired and ctx.Err() when ctx ends first, and one
// matching ErrNotAcquired when WithStallTimeout ran out; either way it
// leaves the lock unchanged.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return rw.c.acquire(ctx, rw.reader(), true)
}

// RLocker returns the read side as a Locker: its TryLock is TryRLock, its
// Lock is RLock, and its Do holds a read share around fn.
func (rw *RWMutex) RLocker() Locker { return readSide{rw} }

// Status reports the writer (Held, Metadata, TTL, Since, Fence), every
// live reader (Readers), the waiting writers (Waiters) and whether one of
// them stops PreferWriters readers (WriterWaiting). Held is true while a
// writer or any reader holds the lock.
func (rw *RWMutex) Status(ctx context.Context) (Status, error) {
	v, err := rw.evalSlice(ctx, "status of", rwStatus, 8)
	if err != nil {
		return Status{}, err
	}
	st := ownerStatus(rw.name, rw.kind, v)
	rs, _ := v[5].([]any)
	for i := 0; i+3 < len(rs); i += 4 {
		meta, _ := rs[i].(string)
		st.Readers = append(st.Readers, Holder{
			Metadata: meta,
			TTL:      ttlOf(toInt(rs[i+1])),
			Fence:    uint64(toInt(rs[i+2])),
			Since:    time.UnixMilli(toInt(rs[i+3])),
			Permits:  1,
		})
	}
	st.Held = st.Held || len(st.Readers) > 0
	st.WriterWaiting = toInt(v[6]) == 1
	st.Waiters = waitersOf(v[7])
	return st, nil
}

// Readers and writers wait on channels of their own, so that a release
// wakes only those it can let in: the last reader's release wakes a
// writer, never the readers held back by that writer's intention.
func (rw *RWMutex) readersChannel() string { return rw.keys.Channel() }
func (rw *RWMutex) writersChannel() string { return rw.keys.SideChannel("w") }

// writer is the acquisition of the write side; block says whether the
// caller will wait, and so whether it joins the writers' line (with an
// intention, under PreferWriters). Writers are handed the lock on their
// client's channel; readers are woken together on theirs.
func (rw *RWMutex) writer(block bool) *acquisition {
	return rw.acquisition(rw, rw.writersChannel(), block)
}

func (rw *RWMutex) tryScript(a *acquisition, tok string, join int) scriptCall {
	// Only a writer that waits has a use for a place in the line
	// (TryLock does not wait), and a PreferReaders writer asks readers for
	// nothing. The place lives as long as the waiter keeps trying: its
	// heartbeat renews it, so a dead writer's lapses.
	intend := 0
	if a.queues() && rw.cfg.rwMode == PreferWriters {
		intend = 1
	}
	return scriptCall{rwLock, rw.kl, []any{tok, millis(rw.cfg.ttl), rw.cfg.metadata,
		join, millis(queueLiveness), intend, mutexStarve.Microseconds()}}
}

func (rw *RWMutex) parseTry(reply any, err error) (attempt, error) { return parseAttempt(reply, err) }

func (rw *RWMutex) granted(*acquisition, attempt) leaseOps { return rw }

func (rw *RWMutex) leave(ctx context.Context, _ *acquisition, tok string) error {
	return rw.handOver(ctx, rwLeave, tok).Err()
}

// reader is the acquisition of a read share.
//
// Why a PreferWriters reader gives way to a writer that merely waits:
// readers that overlap can hold the lock for ever, each joining before the
// last one leaves, and a writer that waits for the lock to be free may
// never see it free (redis-rwlock's reader-preferring mode). Giving way lets
// the readers already inside finish and the writer in; the price is that
// readers wait behind writers, and a steady stream of writers can starve
// them. Which price is right depends on the workload, so each caller
// chooses, and a PreferReaders reader never waits for a writer that does
// not hold the lock.
func (rw *RWMutex) reader() *acquisition {
	a := rw.acquisition(readSide{rw}, rw.readersChannel(), false)
	a.what, a.shared = "rw mutex (read)", true
	return a
}

func (r readSide) tryAlone(ctx context.Context, _ *acquisition, tok string) (attempt, error) {
	giveWay := 0
	if r.rw.cfg.rwMode == PreferWriters {
		giveWay = 1
	}
	reply, err := r.rw.run(ctx, rwRLock, tok, millis(r.rw.cfg.ttl), r.rw.cfg.metadata, giveWay).Result()
	a, err := parseAttempt(reply, err)
	_, a.alone = reply.(string) // a lone reader's fence comes as a string, the others' as an integer
	return a, err
}

func (r readSide) granted(_ *acquisition, a attempt) leaseOps {
	if a.alone {
		return loneShare(r)
	}
	return r
}

// leave gives up a reader, who holds at most a share its try took unseen.
func (r readSide) leave(ctx context.Context, _ *acquisition, tok string) error {
	_, err := r.release(ctx, tok)
	return err
}

// release frees a writer's lease, handing the lock on (see rw_unlock.lua).
func (rw *RWMutex) release(ctx context.Context, tok string) (bool, error) {
	return rw.handOver(ctx, rwUnlock, tok).Bool()
}

// handOver runs a script that lets a writer's hold on the lock go,
// handing the lock to the next writer or the readers (rw_unlock,
// rw_leave), once (see once). Writers barge as Mutex waiters do
// (mutexStarve).
func (rw *RWMutex) handOver(ctx context.Context, s *redis.Script, tok string) *redis.Cmd {
	return rw.runOnce(ctx, s, tok, rw.c.hub.PublishCommand(), rw.readersChannel(), rw.writersChannel(), mutexStarve.Microseconds())
}

// readSide is the read half of an RWMutex: the Locker that RLocker
// returns, and the lease operations of read shares.
type readSide struct{ rw *RWMutex }

func (r readSide) TryLock(ctx context.Context) (*Lease, error) { return r.rw.TryRLock(ctx) }
func (r readSide) Lock(ctx context.Context) (*Lease, error)    { return r.rw.RLock(ctx) }

func (r readSide) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return do(ctx, r.rw.RLock, fn)
}

func (r readSide) renewal(tok string, ttl time.Duration) scriptCall {
	return scriptCall{rwRRefresh, r.rw.share, []any{tok, millis(ttl)}}
}

func (r readSide) refresh(ctx context.Context, tok string, ttl time.Duration) (bool, error) {
	return r.renewal(tok, ttl).run(ctx, r.rw.c.rdb).Bool()
}

func (r readSide) release(ctx context.Context, tok string) (bool, error) {
	return r.rw.runOnce(ctx, rwRUnlock, tok, r.rw.c.hub.PublishCommand(), r.rw.writersChannel(), mutexStarve.Microseconds()).Bool()
}

func (r readSide) held(ctx context.Context, tok string) (bool, error) {
	return rwRHeld.Run(ctx, r.rw.c.rdb, r.rw.share[1:2], tok).Bool() // a share's expiries only
}

// loneShare is the lease operations of a read share taken by a reader
// alone, which Redis keeps in the owner key (see rw_rlock.lua): it is
// renewed and checked as a writer's lease is, in the same batched runs,
// and released as a share.
type loneShare readSide

func (s loneShare) renewal(tok string, ttl time.Duration) scriptCall {
	return s.rw.owner.renewal(tok, ttl)
}

func (s loneShare) refresh(ctx context.Context, tok string, ttl time.Duration) (bool, error) {
	return s.rw.owner.refresh(ctx, tok, ttl)
}

func (s loneShare) release(ctx context.Context, tok string) (bool, error) {
	return readSide(s).release(ctx, tok)
}

func (s loneShare) held(ctx context.Context, tok string) (bool, error) {
	return s.rw.owner.held(ctx, tok)
}
