package dlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Liveness of a waiting writer's intention (PreferWriters). The writer
// renews it with a try every rwHeartbeat; one not renewed for
// rwIntentLiveness (the writer died, or cannot reach Redis) lapses, so a
// dead writer stops new readers for at most rwIntentLiveness, never for a
// lock TTL.
const (
	rwHeartbeat      = time.Second
	rwIntentLiveness = 3 * time.Second
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
// An intention lives while its writer waits: the writer renews it every
// second, it lapses 3 seconds after the writer dies, and it is withdrawn
// when the writer gives up (its ctx ends), which wakes the readers it held
// back. As with sync.RWMutex, do not take a second read share while
// holding one under PreferWriters: a writer waiting in between blocks it,
// and the first share blocks the writer.
//
// Waiters are woken by Redis: a writer's release wakes every waiting reader
// and one waiting writer per client, the last reader's release wakes one
// waiting writer per client. Among writers there is no order, as with
// Mutex.
type RWMutex struct {
	lock
	owner // the writer
}

var _ Locker = (*RWMutex)(nil)

// RWMutex returns the reader/writer lock called name. It is a lock of its
// own, separate from the Mutex of the same name. Invalid names or options
// do not panic: every call of the RWMutex then fails with ErrInvalid.
func (c *Client) RWMutex(name string, opts ...LockOption) *RWMutex {
	rw := &RWMutex{lock: newLock(c, kindRW, name, opts, "fence", "readers", "rexp", "rmeta", "intent")}
	rw.owner = owner{rdb: c.rdb, key: rw.keys.Key()}
	return rw
}

// TryLock takes the write side if no writer and no reader holds it, in one
// round trip. Otherwise it returns ErrNotAcquired and changes nothing: it
// registers no intention.
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
// live reader (Readers) and whether a writer waits (WriterWaiting). Held
// is true while a writer or any reader holds the lock.
func (rw *RWMutex) Status(ctx context.Context) (Status, error) {
	v, err := rw.evalSlice(ctx, "status of", rwStatus, 7)
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
		})
	}
	st.Held = st.Held || len(st.Readers) > 0
	st.WriterWaiting = toInt(v[6]) == 1
	return st, nil
}

// Readers and writers wait on channels of their own, so that a release
// wakes only those it can let in: the last reader's release wakes a
// writer, never the readers held back by that writer's intention.
func (rw *RWMutex) readersChannel() string { return rw.keys.Channel() }
func (rw *RWMutex) writersChannel() string { return rw.keys.SideChannel("w") }

// writer is the acquisition of the write side; block says whether the
// caller will wait, and so whether it registers an intention.
func (rw *RWMutex) writer(block bool) *acquisition {
	var live time.Duration
	a := rw.acquisition(rw.writersChannel())
	a.ops = func(attempt) leaseOps { return rw }
	a.leave = rw.leave
	if block && rw.cfg.rwMode == PreferWriters {
		// Only a writer that waits has a use for an intention (TryLock
		// does not wait), and a PreferReaders writer asks readers for
		// nothing. The intention lives as long as the waiter keeps
		// trying: its heartbeat renews it, so a dead writer's lapses.
		live = rwIntentLiveness
		a.heartbeat = rwHeartbeat
	}
	a.try = func(ctx context.Context, tok string) (attempt, error) {
		return parseAttempt(rw.run(ctx, rwLock, tok, millis(rw.cfg.ttl), rw.cfg.metadata, millis(live)).Slice())
	}
	return a
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
	giveWay := 0
	if rw.cfg.rwMode == PreferWriters {
		giveWay = 1
	}
	a := rw.acquisition(rw.readersChannel())
	a.what = "rw mutex (read)"
	a.try = func(ctx context.Context, tok string) (attempt, error) {
		return parseAttempt(rw.run(ctx, rwRLock, tok, millis(rw.cfg.ttl), rw.cfg.metadata, giveWay).Slice())
	}
	a.ops = func(attempt) leaseOps { return readSide{rw} }
	// A reader that gives up holds at most a share its try took unseen.
	a.leave = func(ctx context.Context, tok string) error {
		_, err := readSide{rw}.release(ctx, tok)
		return err
	}
	return a
}

// release frees a writer's lease.
func (rw *RWMutex) release(ctx context.Context, tok string) (bool, error) {
	return rw.run(ctx, rwUnlock, tok, rw.c.hub.PublishCommand(), rw.readersChannel(), rw.writersChannel()).Bool()
}

// leave withdraws a writer that gives up: its intention, and the write
// side if a try of its own took it unseen.
func (rw *RWMutex) leave(ctx context.Context, tok string) error {
	return rw.run(ctx, rwLeave, tok, rw.c.hub.PublishCommand(), rw.readersChannel(), rw.writersChannel()).Err()
}

// readSide is the read half of an RWMutex: the Locker that RLocker
// returns, and the lease operations of read shares.
type readSide struct{ rw *RWMutex }

func (r readSide) TryLock(ctx context.Context) (*Lease, error) { return r.rw.TryRLock(ctx) }
func (r readSide) Lock(ctx context.Context) (*Lease, error)    { return r.rw.RLock(ctx) }

func (r readSide) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return do(ctx, r.rw.RLock, fn)
}

func (r readSide) refresh(ctx context.Context, tok string, ttl time.Duration) (bool, error) {
	return r.rw.run(ctx, rwRRefresh, tok, millis(ttl)).Bool()
}

func (r readSide) release(ctx context.Context, tok string) (bool, error) {
	return r.rw.run(ctx, rwRUnlock, tok, r.rw.c.hub.PublishCommand(), r.rw.writersChannel()).Bool()
}

func (r readSide) client() redis.UniversalClient { return r.rw.c.rdb }

func (r readSide) held(ctx context.Context, tok string) (bool, error) {
	return r.rw.run(ctx, rwRHeld, tok).Bool()
}
