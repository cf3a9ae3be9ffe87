package dlock

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// An acquisition that fails may have left something in Redis: a lease
// its try took though the reply never came (the connection broke, or the
// caller's ctx ended while Redis was slow), a place in a queue, a writer's
// intention. Left there, it would make every other caller wait out the
// lease's TTL. So a failed acquisition gives up what it may hold, and a
// give-up that cannot reach Redis now is retried in the background.
const (
	// giveUpTry bounds one attempt to give up.
	giveUpTry = time.Second
	// closeGrace is how long Close lets give-ups still running finish.
	closeGrace = time.Second
	// maxLapses bounds how far a give-up's lapse is pushed back while
	// Redis does not answer (see giveUps.run), in lapses.
	maxLapses = 3
)

// giveUp withdraws tok from a. answered tells whether the last try's
// outcome is known. If not, Redis may still apply it, so the withdrawal is
// made twice: at once, and again once pending (the abandoned request, if
// any) has finished and Redis answered the first withdrawal, by when a
// request that was on its way to Redis has been run. The first attempt is
// made by the caller while ctx lives; the rest run in the background until
// they succeed, what tok may hold would have expired by itself, or the
// client is closed.
func (c *Client) giveUp(ctx context.Context, a *acquisition, tok string, pending <-chan struct{}, answered bool) {
	rounds := 2
	if answered {
		rounds = 1
	}
	if ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, giveUpTry)
		err := a.withdraw(actx, tok)
		cancel()
		if err == nil {
			rounds--
		}
	}
	if rounds > 0 {
		c.giveUpLater(a, tok, pending, rounds)
	}
}

// giveUpLater is giveUp's background part: rounds withdrawals of tok
// from a, the last after pending, retried until they succeed or what tok
// holds has lapsed by itself (after the TTL, or the queue liveness for a
// waiter's place).
func (c *Client) giveUpLater(a *acquisition, tok string, pending <-chan struct{}, rounds int) {
	lapse := time.Duration(0)
	if a.lock.cfg.ttl > 0 {
		lapse = max(a.lock.cfg.ttl, queueLiveness)
	}
	c.giveUps.start(a.name, lapse, func(ctx context.Context) error { return a.withdraw(ctx, tok) }, pending, rounds, nil)
}

// withdraw is one attempt of a's leave for tok, returning by ctx's end.
func (a *acquisition) withdraw(ctx context.Context, tok string) error {
	_, err := bounded(ctx, a.lock.c, func(ctx context.Context) (struct{}, error) { return struct{}{}, a.leave(ctx, tok) })
	return err
}

// giveUps runs a client's give-ups in the background.
type giveUps struct {
	log    *slog.Logger
	ctx    context.Context // ends when the client is closed
	cancel context.CancelFunc
	mu     sync.Mutex
	wg     sync.WaitGroup
	closed bool
}

func newGiveUps(log *slog.Logger) *giveUps {
	ctx, cancel := context.WithCancel(context.Background())
	return &giveUps{log: log, ctx: ctx, cancel: cancel}
}

// start runs withdraw (a give-up, or a release that Unlock could not
// make) in the background rounds times, the last time after pending,
// retrying it while it fails, until lapse has passed (0: until Close), by
// when what it withdraws has expired by itself. If it stops before
// withdraw succeeded, it calls quit, if set.
func (g *giveUps) start(name string, lapse time.Duration, withdraw func(context.Context) error, pending <-chan struct{}, rounds int, quit func()) {
	ran := g.do(name, func(context.Context) {
		if !g.run(name, lapse, withdraw, pending, rounds) && quit != nil {
			quit()
		}
	})
	if !ran && quit != nil {
		quit()
	}
}

// do runs f, background work for the lock name, on a goroutine of its own
// with a ctx that ends when the client is closed (Close lets it finish
// for up to closeGrace first). Once the client is closed it runs nothing,
// says so in the log, and returns false.
func (g *giveUps) do(name string, f func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.log.Warn("dlock: client closed; what a failed acquisition or unlock may hold lapses with its TTL", "lock", name)
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f(g.ctx)
	}()
	return true
}

// run is start's goroutine; it reports whether withdraw succeeded.
func (g *giveUps) run(name string, lapse time.Duration, withdraw func(context.Context) error, pending <-chan struct{}, rounds int) bool {
	// lapse counts from the last attempt that did not reach Redis: until
	// Redis answers, a request it has not read yet (the abandoned try, in
	// a paused server's socket buffer or on a partitioned network) may
	// still run, and hold for a whole TTL from then.
	ctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	var lapsed *time.Timer
	if lapse > 0 {
		lapsed = time.AfterFunc(lapse, cancel)
		defer lapsed.Stop()
	}
	// However long Redis stays silent, the lapse is pushed back no later
	// than this: a node paused or cut off for good must not keep one
	// goroutine per failed acquisition for as long.
	limit := time.Now().Add(maxLapses * lapse)
	var backoff time.Duration
	for rounds > 0 {
		if rounds == 1 && pending != nil {
			select {
			case <-pending:
			case <-ctx.Done():
			}
		}
		actx, acancel := context.WithTimeout(ctx, giveUpTry)
		err := withdraw(actx)
		acancel()
		switch {
		case err == nil:
			rounds--
			continue
		case ctx.Err() != nil || !transient(err):
			g.log.Warn("dlock: giving up a failed acquisition or unlock did not reach Redis; what it may hold lapses with its TTL",
				"lock", name, "err", err)
			return false
		}
		if lapsed != nil && mayHaveRun(err) && time.Until(limit) > lapse {
			// (An attempt refused at dial, or never given a connection,
			// says nothing of Redis running the abandoned try later: a
			// Redis that is down must not keep this goroutine for good.)
			lapsed.Reset(lapse)
		}
		backoff = grow(backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
	}
	return true
}

// close lets running give-ups finish for up to closeGrace, then stops
// them.
func (g *giveUps) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.cancel()
		<-done
	}
	g.cancel()
}
