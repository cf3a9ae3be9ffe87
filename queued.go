package dlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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

// queued is what Mutex and FairMutex share: the holder in an owner key,
// the waiters in a queue in Redis, ordered by Redis, and a release that
// hands the lock to the first live waiter and only it (one message,
// however many wait, on however many clients; see hand_over in
// lua/lib/waiters.lua). They differ in starve only.
type queued struct {
	lock
	owner
}

// queuedParts are the keys of a queued lock besides its owner key, in
// the order of its scripts' KEYS: the last fence, the queue, the
// waiters' liveness and their metadata. The scripts name them from the
// owner key on a single Redis (see lock.kl), as a batched heartbeat
// (queue_beats.lua) does everywhere.
var queuedParts = []string{"fence", "queue", "alive", "wmeta"}

// queued returns the queued lock of kind k (kindMutex, kindFair or
// kindElect).
func (c *Client) queued(k kind, name string, opts []LockOption) *queued {
	q := &queued{lock: newLock(c, k, name, opts, queuedParts...)}
	q.owner = owner{rdb: c.rdb, key: q.keys.Key()}
	return q
}

// queueArgs are the arguments of a kind's scripts that Redis reads only
// off their common path: its starve_us, how long the first waiter may
// wait before newcomers must queue behind it (see queue_acquire.lua),
// and a try's third argument, "<join> <liveness ms> <starve µs>", by join
// mode (joinNever, joinQueue).
type queueArgs struct {
	starve string
	try    [3]string // and joinBeat's, for a MutexSet (set_acquire.lua)
}

// mutexArgs are a Mutex's (starve_us mutexStarve), fairArgs the other
// kinds' (0: at once).
var mutexArgs, fairArgs = argsFor(mutexStarve), argsFor(0)

func argsFor(starve time.Duration) (a queueArgs) {
	a.starve = strconv.FormatInt(starve.Microseconds(), 10)
	for join := range a.try {
		a.try[join] = fmt.Sprint(join, " ", millis(queueLiveness), " ", a.starve)
	}
	return a
}

// args are the lock's queueArgs.
func (q *queued) args() *queueArgs {
	if q.kind == kindMutex {
		return &mutexArgs
	}
	return &fairArgs
}

func (q *queued) acquire(ctx context.Context, block bool) (*Lease, error) {
	return q.c.acquire(ctx, q.acquisition(block, q.cfg.metadata), block)
}

// Status reads the holder and the live waiters in queue order.
func (q *queued) Status(ctx context.Context) (Status, error) {
	v, err := q.evalSlice(ctx, "status of", queueStatus, 6)
	if err != nil {
		return Status{}, err
	}
	st := ownerStatus(q.name, q.kind, v)
	st.Waiters = waitersOf(v[5])
	return st, nil
}

// acquisition tries for the lock, for a holder that Status shows with
// meta; a caller that will wait joins the queue, and is handed the lock
// on its client's channel.
func (q *queued) acquisition(wait bool, meta string) *acquisition {
	a := q.lock.acquisition(q, q.keys.Channel(), wait)
	a.meta = meta
	return a
}

func (q *queued) tryScript(a *acquisition, tok string, join int) scriptCall {
	if join == joinBeat {
		return scriptCall{queueBeat, q.kl, []any{tok, millis(queueLiveness)}}
	}
	args := []any{tok, millis(q.cfg.ttl), q.args().try[join]}
	if a.meta != "" || q.announce != nil {
		args = append(args, a.meta)
	}
	return scriptCall{queueAcquire, q.kl, append(args, q.announce...)}
}

func (q *queued) parseTry(reply any, err error) (attempt, error) { return parseAttempt(reply, err) }

func (q *queued) granted(*acquisition, attempt) leaseOps { return q }

func (q *queued) leave(ctx context.Context, _ *acquisition, tok string) error {
	return q.handOver(ctx, queueLeave, tok).Err()
}

func (q *queued) release(ctx context.Context, tok string) (bool, error) {
	return q.handOver(ctx, queueRelease, tok).Bool()
}

// handOver runs a script that lets tok's hold on the lock go, handing the
// lock to the first waiter (queue_release, queue_leave), once (see once).
func (q *queued) handOver(ctx context.Context, s *redis.Script, tok string) *redis.Cmd {
	args := []any{tok, q.wakeArg(q.args().starve)}
	if q.announce != nil {
		args = append(args, 1) // a hand-over announces itself
	}
	return q.runOnce(ctx, s, args...)
}

func (q *queued) holders() holders {
	return holders{keys: []string{q.keys.Key()}, channels: []string{q.keys.Channel()}, queues: []string{q.keys.Part("queue")}}
}
