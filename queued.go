package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
)

// Waiter liveness of a Mutex or FairMutex. A queued waiter renews its
// place every queueHeartbeat; one that has not done so for queueLiveness
// (it died, or cannot reach Redis) is dropped from the queue, so a dead
// waiter delays the ones behind it by at most queueLiveness, never by a
// lock TTL.
const (
	queueHeartbeat = time.Second
	queueLiveness  = 3 * time.Second
)

// mutexStarve is how long the first waiter of a Mutex may wait before a
// free Mutex is kept for it rather than taken by a newcomer: sync.Mutex's
// starvation threshold.
const mutexStarve = time.Millisecond

// queued is what Mutex and FairMutex share: the holder in an owner hash,
// the waiters in a queue in Redis, ordered by Redis, and a release that
// wakes the first live waiter and only it (one message, one try, however
// many wait, on however many clients). They differ in starve only.
type queued struct {
	owner
	c      *Client
	name   string
	kind   string // "mutex" or "fair mutex", for messages
	cfg    lockConfig
	keys   keys.Lock
	starve time.Duration // see queue_acquire.lua; 0 for FairMutex
	err    error         // bad name or options, returned by every call
}

func newQueued(c *Client, kind, what, name string, starve time.Duration, opts []LockOption) queued {
	q := queued{c: c, name: name, kind: what, cfg: newLockConfig(opts), starve: starve}
	q.keys, q.err = c.lockKeys(kind, name)
	if q.err == nil {
		q.err = q.cfg.err
	}
	q.owner = owner{rdb: c.rdb, key: q.keys.Key()}
	return q
}

func (q *queued) acquire(ctx context.Context, block bool) (*Lease, error) {
	if q.err != nil {
		return nil, q.err
	}
	return q.c.acquire(ctx, q.acquisition(block), block)
}

func (q *queued) status(ctx context.Context, kind string) (Status, error) {
	if q.err != nil {
		return Status{}, q.err
	}
	v, err := eval(ctx, q.c.rdb, queueStatus, (*redis.Cmd).Slice, q.keyList())
	if err != nil {
		return Status{}, fmt.Errorf("dlock: status of %s %q: %w", q.kind, q.name, err)
	}
	if len(v) < 6 {
		return Status{}, fmt.Errorf("dlock: status of %s %q: %w %v", q.kind, q.name, errBadReply, v)
	}
	st := ownerStatus(q.name, kind, v)
	w, _ := v[5].([]any)
	for i := 0; i+1 < len(w); i += 2 {
		meta, _ := w[i].(string)
		st.Waiters = append(st.Waiters, Waiter{Metadata: meta, Since: time.UnixMilli(toInt(w[i+1]))})
	}
	return st, nil
}

func (q *queued) keyList() []string {
	return []string{q.keys.Key(), q.keys.Part("fence"), q.keys.Part("queue"), q.keys.Part("alive"), q.keys.Part("wmeta")}
}

// acquisition tries for the lock; a caller that will wait joins the queue.
func (q *queued) acquisition(wait bool) *acquisition {
	enqueue := 0
	if wait {
		enqueue = 1
	}
	return &acquisition{
		rdb:       q.c.rdb,
		kind:      q.kind,
		name:      q.name,
		cfg:       q.cfg,
		channel:   q.keys.Channel(),
		heartbeat: queueHeartbeat,
		try: func(ctx context.Context, tok string) (attempt, error) {
			v, err := queueAcquire.Run(ctx, q.c.rdb, q.keyList(), tok, millis(q.cfg.ttl), q.cfg.metadata,
				enqueue, millis(queueLiveness), q.starve.Microseconds()).Slice()
			if err != nil {
				return attempt{}, err
			}
			return parseAttempt(v)
		},
		grant: func(tok string, r attempt, sent time.Time) *Lease {
			return newLease(q.c, q.name, tok, r.fence, q, q.cfg, sent)
		},
		leave: func(ctx context.Context, tok string) error {
			return queueLeave.Run(ctx, q.c.rdb, q.keyList(), tok, q.c.hub.PublishCommand(), q.keys.Channel()).Err()
		},
	}
}

func (q *queued) release(ctx context.Context, tok string) (bool, error) {
	return queueRelease.Run(ctx, q.c.rdb, q.keyList(), tok, q.c.hub.PublishCommand(), q.keys.Channel()).Bool()
}

func (q *queued) holderKeys() ([]string, []string) {
	return []string{q.keys.Key()}, []string{q.keys.Channel()}
}
