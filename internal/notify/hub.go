// Package notify wakes waiting lock callers when Redis announces a release.
//
// A Hub multiplexes the release channels of every lock its Client waits on
// over ONE subscription connection (on Redis Cluster, one per shard that has
// waiters, using sharded pub/sub). Waiters register before their last try,
// so no release between that try and the wait can be missed while the
// connection is healthy. When the connection breaks, the hub reconnects,
// resubscribes, and wakes every waiter once the subscription is back, since
// announcements may have been lost in between. Waiters never depend on the
// hub alone: they also wake by themselves when the holder's lease runs out.
package notify

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Payloads a release script may publish. Any other payload, "<key>" or
// "<key> <grant>", wakes the waiters registered with that key (a queue
// wakes one token) and hands them the grant, if any (see Waiter.Grant).
const (
	WakeOne = "one" // wake the longest-waiting local waiter not already woken
	WakeAll = "all" // wake every local waiter of the channel
)

// Every is the key of a waiter that follows a channel rather than waits
// its turn (an Election's observer): every payload wakes it, and WakeOne
// never picks it, so it takes no wake-up meant for a lock's waiter.
const Every = "*"

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("dlock: client is closed")

const (
	// confirmWait bounds how long Subscribe waits for Redis to confirm a
	// subscription; past it the waiter relies on its own expiry wake.
	confirmWait = 2 * time.Second
	// idleCheck is how long the connection may be silent before it is
	// pinged; a ping unanswered for as long again means it is dead.
	idleCheck = 3 * time.Second
	// linger keeps a channel subscribed after its last waiter left, so a
	// lock under steady contention does not pay a subscribe per waiter.
	linger = 5 * time.Second
	// closeWait bounds how long Close waits for the connections to close
	// and the receive loops to end. A command may be waiting for a Redis
	// that does not answer, on a client with no read timeout: go-redis
	// heeds no ctx then, and only Redis' answer ends the wait.
	closeWait = time.Second
)

// Hub is a shared subscription for all waiters of one Client.
type Hub struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil unless rdb is a cluster client
	log     *slog.Logger

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the receive loops, and Close's shard closers

	mu     sync.Mutex
	shards map[string]*shard   // by master address; "" when not a cluster
	chans  map[string]*channel // by channel name
	closed bool
}

// channel is one subscribed release channel and its local waiters, oldest
// first.
type channel struct {
	name    string
	shard   *shard
	waiters []*Waiter
	pending int // subscribe/unsubscribe replies still to come
	// settled, while a Subscribe waits for Redis' answer, is closed when
	// the wait is over: Redis confirmed the subscription, or refused it
	// (refusal then says why), or the hub gave the channel up (it left
	// chans). It is nil otherwise, so that a channel in use holds no Go
	// channel of its own.
	settled    chan struct{}
	refusal    error
	idle       *time.Timer
	subscribed bool // what we asked Redis for last
	confirmed  bool
	disrupted  bool // the connection broke since the last confirmation
}

// shard is one subscription connection.
type shard struct {
	addr    string
	cmdMu   sync.Mutex // keeps subscribe commands in bookkeeping order
	ps      *redis.PubSub
	running bool // the receive loop runs
	// reloaded is when the receive loop last had the slot map reloaded
	// (see moved); only that loop uses it.
	reloaded time.Time
	// stray counts, by channel, the unsubscribe commands sent on ps for
	// subscriptions Redis confirmed after the hub had given them up (see
	// dropStray), whose replies are still to come. Guarded by hub.mu.
	stray map[string]int
}

// Waiter is one registered waiter. The hub rings its bell, a Go channel
// of capacity one, when it wakes the waiter and when the hub closes; the
// bell's owner may have other sources ring it too (a heartbeat's reply),
// so that one blocked receive waits for them all. A ring says "look":
// Woken tells whether the hub woke the waiter, Closed whether it closed.
type Waiter struct {
	hub  *Hub
	ch   *channel
	key  string
	bell chan struct{}
	// Guarded by hub.mu: woken is a wake-up given and not yet taken (see
	// Woken), grant the last grant received and not yet taken.
	woken bool
	grant string
}

// New returns a hub for rdb. It opens no connection until the first
// Subscribe.
func New(rdb redis.UniversalClient, log *slog.Logger) *Hub {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		rdb:    rdb,
		log:    log,
		ctx:    ctx,
		cancel: cancel,
		shards: make(map[string]*shard),
		chans:  make(map[string]*channel),
	}
	h.cluster, _ = rdb.(*redis.ClusterClient)
	return h
}

// PublishCommand is the command release scripts must publish with: SPUBLISH
// on Redis Cluster, where plain PUBLISH would flood every node, PUBLISH
// elsewhere.
func (h *Hub) PublishCommand() string {
	if h.cluster != nil {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// Subscribe registers a waiter on channel and waits until Redis confirmed
// the subscription (at most a couple of seconds; past that the waiter still
// works through its own expiry wake). key selects targeted wake-ups; it may
// be empty. The hub rings bell (capacity one; nil: one of the waiter's
// own, see C) to wake the waiter. The waiter must be closed.
func (h *Hub) Subscribe(ctx context.Context, name, key string, bell chan struct{}) (*Waiter, error) {
	addr, err := h.shardAddr(ctx, name)
	if err != nil {
		return nil, err
	}
	var w *Waiter
	for w == nil {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, ErrClosed
		}
		ch := h.chans[name]
		if ch != nil && ch.subscribed {
			w = ch.add(h, key, bell)
			h.mu.Unlock()
			break
		}
		sh := h.shard(addr)
		if ch != nil {
			sh = ch.shard
		}
		h.mu.Unlock()
		w = h.subscribeOn(ctx, sh, name, key, bell)
	}
	if err := h.awaitAnswer(ctx, w); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// awaitAnswer waits until Redis answered the subscription w joined: it
// confirmed it, or the hub gave the channel up before (its connection
// broke: w is then Detached and already woken, and subscribes again after
// its next try), or at most confirmWait. It fails if Redis refused the
// subscription, or ctx or the hub ended.
func (h *Hub) awaitAnswer(ctx context.Context, w *Waiter) error {
	h.mu.Lock()
	settled := w.ch.awaited(h)
	h.mu.Unlock()
	if settled != nil {
		t := time.NewTimer(confirmWait)
		defer t.Stop()
		select {
		case <-settled:
		case <-t.C:
			// A release announced before the late confirmation would be
			// lost: have the confirmation wake everyone.
			h.mu.Lock()
			if !w.ch.confirmed {
				w.ch.disrupted = true
			}
			h.mu.Unlock()
			h.log.Warn("dlock: subscription not confirmed in time; waiting on lease expiry meanwhile", "channel", w.ch.name)
		case <-ctx.Done():
			return ctx.Err()
		case <-h.ctx.Done():
			return ErrClosed
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Not allowed to listen (an ACL without the channel): waiting would
	// only ever wake by timers, so say so.
	return w.ch.refusal
}

// awaited returns what to wait on for Redis' answer to ch's subscription,
// or nil if there is nothing to wait for: it is confirmed, or ch was
// given up. The caller holds h.mu.
func (ch *channel) awaited(h *Hub) chan struct{} {
	if ch.confirmed || h.chans[ch.name] != ch {
		return nil
	}
	if ch.settled == nil {
		ch.settled = make(chan struct{})
	}
	return ch.settled
}

// settle ends the waits for Redis' answer to ch's subscription (see
// awaited). The caller holds h.mu.
func (ch *channel) settle() {
	if ch.settled != nil {
		close(ch.settled)
		ch.settled = nil
	}
}

// subscribeOn registers a waiter on a channel served by sh, subscribing
// it if needed. Commands to one connection must go out in the order of
// the bookkeeping, so the shard's command lock is taken first and the
// state checked again under h.mu (never the other way round). It returns
// nil if the state changed meanwhile and the caller must start over.
func (h *Hub) subscribeOn(ctx context.Context, sh *shard, name, key string, bell chan struct{}) *Waiter {
	sh.cmdMu.Lock()
	defer sh.cmdMu.Unlock()
	h.mu.Lock()
	ch := h.chans[name]
	if h.closed || h.shards[sh.addr] != sh || (ch != nil && ch.shard != sh) {
		h.mu.Unlock()
		return nil
	}
	if ch == nil {
		ch = &channel{name: name, shard: sh}
		h.chans[name] = ch
	}
	w := ch.add(h, key, bell)
	send := !ch.subscribed
	if send {
		ch.subscribed = true
		ch.pending++
	}
	h.mu.Unlock()
	if !send {
		return w
	}
	// Sent under the hub's context, not the caller's: a deadline that
	// passed (while it waited for cmdMu, or on a worker it was abandoned
	// by) would fail the write, and go-redis would drop the shared
	// connection, every waiter's subscription with it.
	if err := h.subscribe(h.ctx, sh, name); err != nil {
		// go-redis may have reconnected silently without this channel:
		// start over on a new connection, which resubscribes everything.
		h.log.Warn("dlock: subscribe failed; reconnecting", "channel", name, "err", err)
		_ = sh.ps.Close()
	}
	if !sh.running {
		// Started only now so that, on a cluster, the connection is opened
		// for this channel's shard rather than a random node.
		sh.running = true
		h.wg.Add(1)
		go h.receive(sh)
	}
	return w
}

// add registers a new waiter that bell wakes (nil: a bell of its own).
// The caller holds h.mu.
func (ch *channel) add(h *Hub, key string, bell chan struct{}) *Waiter {
	if ch.idle != nil {
		ch.idle.Stop()
		ch.idle = nil
	}
	if bell == nil {
		bell = make(chan struct{}, 1)
	}
	w := &Waiter{hub: h, ch: ch, key: key, bell: bell}
	ch.waiters = append(ch.waiters, w)
	return w
}

// Detached reports whether the waiter's subscription was given up by the
// hub (Redis dropped it, or its cluster shard moved); the waiter should
// then close and Subscribe again.
func (w *Waiter) Detached() bool {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.chans[w.ch.name] != w.ch
}

// Join registers a waiter on channel if the hub already holds a confirmed
// subscription to it, without any network traffic; otherwise it returns
// nil. A waiter that joined before its try needs no second try after
// subscribing: no release could have gone unheard in between. bell is as
// for Subscribe.
func (h *Hub) Join(name, key string, bell chan struct{}) *Waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[name]
	if h.closed || ch == nil || !ch.confirmed {
		return nil
	}
	return ch.add(h, key, bell)
}

// C is the waiter's bell: it receives when the waiter should look whether
// it was woken or the hub closed (and, if the bell is shared, whatever
// else rings it).
func (w *Waiter) C() <-chan struct{} { return w.bell }

// Woken takes the waiter's wake-up: it reports whether the hub woke the
// waiter since it last asked, and the waiter should try again. Until it
// is taken, a wake-up keeps the hub from waking the waiter again, and one
// still untaken at Close goes to another waiter.
func (w *Waiter) Woken() bool {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	woken := w.woken
	w.woken = false
	return woken
}

// Closed reports whether the hub was closed.
func (w *Waiter) Closed() bool {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// Grant takes the grant that came with the last targeted wake-up ("" if
// none): what a release script handed this waiter besides waking it.
func (w *Waiter) Grant() string {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	g := w.grant
	w.grant = ""
	return g
}

// Done is closed when the hub is closed.
func (h *Hub) Done() <-chan struct{} { return h.ctx.Done() }

// Handoff wakes another waiter in this one's place: a waiter that consumed
// a wake-up and then gives up without trying must not swallow the release.
// A wake-up that came with a grant not taken is not passed on (see Close).
func (w *Waiter) Handoff() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.grant == "" {
		h.wakeOne(w.ch, w)
	}
}

// Close unregisters the waiter. A wake-up it had not taken goes to the
// next waiter, unless it came with a grant not taken: the release that
// sent it handed its token alone what it let go (the waiter took it by a
// try of its own, or its give-up hands it on, waking the next itself),
// so another waiter would find nothing to take.
func (w *Waiter) Close() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := w.ch
	for i, x := range ch.waiters {
		if x == w {
			ch.waiters = append(ch.waiters[:i], ch.waiters[i+1:]...)
			break
		}
	}
	if w.woken && w.key != Every && w.grant == "" {
		h.wakeOne(ch, nil)
	}
	w.woken = false // passed on once, however often Close is called
	if len(ch.waiters) == 0 && ch.subscribed && !h.closed && ch.idle == nil {
		ch.idle = time.AfterFunc(linger, func() { h.unsubscribeIdle(ch) })
	}
}

// Close ends every subscription and makes later Subscribe calls fail.
// Waiters still registered have their bell rung, and see Closed. It
// returns once the connections are closed and the receive loops ended, or
// after closeWait: a command still waiting for Redis then finishes in the
// background, and its connection is closed after it.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	for _, ch := range h.chans {
		if ch.idle != nil {
			ch.idle.Stop()
		}
		for _, w := range ch.waiters {
			Ring(w.bell)
		}
	}
	shards := h.shards
	h.mu.Unlock()

	h.cancel()
	// Each shard's connection is closed after the command under way on it
	// (see cmdMu), all in parallel: no shard waits for another's Redis.
	errs := make(chan error, len(shards))
	for _, sh := range shards {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			sh.cmdMu.Lock()
			defer sh.cmdMu.Unlock()
			errs <- sh.ps.Close()
		}()
	}
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return nil
	}
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// shardAddr returns the address of the node that serves channel on a
// cluster, and "" elsewhere.
func (h *Hub) shardAddr(ctx context.Context, channel string) (string, error) {
	if h.cluster == nil {
		return "", nil
	}
	node, err := h.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return "", err
	}
	return node.Options().Addr, nil
}

// shard returns the subscription connection for addr, creating it. The
// caller holds h.mu.
func (h *Hub) shard(addr string) *shard {
	sh := h.shards[addr]
	if sh == nil {
		sh = &shard{addr: addr, ps: h.newPubSub()}
		h.shards[addr] = sh
	}
	return sh
}

func (h *Hub) newPubSub() *redis.PubSub {
	if h.cluster != nil {
		return h.cluster.SSubscribe(h.ctx)
	}
	return h.rdb.Subscribe(h.ctx)
}

func (h *Hub) subscribe(ctx context.Context, sh *shard, channels ...string) error {
	if h.cluster != nil {
		return sh.ps.SSubscribe(ctx, channels...)
	}
	return sh.ps.Subscribe(ctx, channels...)
}

func (h *Hub) unsubscribe(ctx context.Context, sh *shard, channel string) error {
	if h.cluster != nil {
		return sh.ps.SUnsubscribe(ctx, channel)
	}
	return sh.ps.Unsubscribe(ctx, channel)
}

// unsubscribeIdle drops a channel that had no waiter for the linger time.
func (h *Hub) unsubscribeIdle(ch *channel) {
	sh := ch.shard
	sh.cmdMu.Lock()
	defer sh.cmdMu.Unlock()
	h.mu.Lock()
	if h.closed || len(ch.waiters) > 0 || !ch.subscribed || h.chans[ch.name] != ch {
		h.mu.Unlock()
		return
	}
	ch.idle = nil
	ch.subscribed = false
	ch.pending++
	ch.confirmed = false
	h.mu.Unlock()
	if err := h.unsubscribe(h.ctx, sh, ch.name); err != nil && h.ctx.Err() == nil {
		// As for a failed subscribe: start over on a new connection.
		h.log.Debug("dlock: unsubscribe failed; reconnecting", "channel", ch.name, "err", err)
		_ = sh.ps.Close()
	}
}

// receive reads one subscription connection until the hub closes.
func (h *Hub) receive(sh *shard) {
	defer h.wg.Done()
	backoff := time.Duration(0)
	pinged := false
	for h.ctx.Err() == nil {
		msg, err := sh.ps.ReceiveTimeout(h.ctx, idleCheck)
		if h.ctx.Err() != nil {
			return
		}
		var reply redis.Error
		if errors.As(err, &reply) {
			if strings.HasPrefix(err.Error(), "NOPERM") {
				h.refuse(sh, err)
				continue
			}
			// An error reply (MOVED after a slot migration, say) on a
			// healthy connection. On a cluster the channel may live
			// elsewhere now: the channels still unconfirmed are detached,
			// and their waiters subscribe again through fresh routing.
			h.log.Warn("dlock: subscription command refused", "err", err)
			if h.cluster != nil {
				h.detachUnconfirmed(sh)
				continue
			}
			// Elsewhere (BUSY while a script runs long, say) the reply
			// does not say which channel it refused, and one left
			// unconfirmed would stay so, unheard, while the connection
			// lasts: start over as for a broken connection.
		}
		if err != nil {
			var netErr interface{ Timeout() bool }
			if errors.As(err, &netErr) && netErr.Timeout() && !pinged {
				if h.cluster != nil && h.moved(sh) {
					// A channel's slot is served elsewhere now, and Redis
					// said nothing (a master demoted to a replica keeps
					// its shard subscriptions, and hears no release):
					// start over through fresh routing.
					if !h.restart(sh, errMoved) {
						return
					}
					continue
				}
				pinged = true
				if err := sh.ps.Ping(h.ctx); err == nil {
					continue
				}
			}
			// The connection is broken, silent though pinged, or refused
			// a subscription: start over on a new one, resubscribed to
			// every wanted channel.
			if !h.restart(sh, err) {
				return
			}
			pinged = false
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-h.ctx.Done():
				return
			}
			continue
		}
		backoff, pinged = 0, false
		switch m := msg.(type) {
		case *redis.Subscription:
			if h.confirm(sh, m) {
				h.dropStray(sh, m.Channel)
			}
		case *redis.Message:
			h.dispatch(m.Channel, m.Payload)
		}
	}
}

// errMoved is why a shard's connection is given up when the slot of one
// of its channels has another master now.
var errMoved = errors.New("a channel's slot moved to another master")

// topologyCheck is how often, at most, an idle shard connection has the
// cluster's slot map reloaded to see whether its channels moved.
const topologyCheck = 10 * time.Second

// moved reports whether a channel confirmed on sh now has another master,
// by the cluster client's slot map, and has the map reloaded now and then
// (asynchronously: a change shows at a later check).
func (h *Hub) moved(sh *shard) bool {
	if time.Since(sh.reloaded) >= topologyCheck {
		sh.reloaded = time.Now()
		h.cluster.ReloadState(h.ctx)
	}
	h.mu.Lock()
	var names []string
	for name, ch := range h.chans {
		if ch.shard == sh && ch.confirmed {
			names = append(names, name)
		}
	}
	h.mu.Unlock()
	for _, name := range names {
		if addr, err := h.shardAddr(h.ctx, name); err == nil && addr != sh.addr {
			return true
		}
	}
	return false
}

// refuse fails the subscriptions of sh still waiting for Redis'
// confirmation, which Redis refused for want of a permission: the reply
// does not say which channel, but an ACL that refuses one dlock channel
// refuses them all. Their Subscribe calls return err, and the channels are
// forgotten (Redis holds no subscription for them), so that the next
// Subscribe asks Redis again: the ACL may have been fixed meanwhile.
func (h *Hub) refuse(sh *shard, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.chans {
		if ch.shard == sh && ch.subscribed && !ch.confirmed && ch.refusal == nil {
			ch.refusal = err
			// Detached and woken: a waiter registered before (subscribed
			// again after its connection broke) learns of the refusal by
			// subscribing again, instead of sleeping on a dead channel.
			h.detach(ch)
		}
	}
}

// detachUnconfirmed detaches the channels of sh whose subscription Redis
// has not confirmed: the reply that refused one does not say which.
func (h *Hub) detachUnconfirmed(sh *shard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.chans {
		if ch.shard == sh && ch.subscribed && !ch.confirmed {
			h.detach(ch)
		}
	}
}

// restart replaces a shard's broken connection. Replies to commands sent
// on the old one will never come, so the bookkeeping restarts from the set
// of wanted channels, and every waiter is woken when its channel is back.
// On a cluster the shard's channels may now live on another node: they are
// detached instead, and their waiters, woken now, subscribe again through
// fresh routing. A shard with nothing left to subscribe is dropped; restart
// then reports false and the receive loop ends.
func (h *Hub) restart(sh *shard, cause error) bool {
	sh.cmdMu.Lock()
	defer sh.cmdMu.Unlock()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	var want []string
	for _, ch := range h.chans {
		if ch.shard != sh {
			continue
		}
		ch.pending = 0
		switch {
		case h.cluster != nil:
			h.detach(ch)
		case !ch.subscribed:
			if len(ch.waiters) == 0 {
				delete(h.chans, ch.name)
			}
		default:
			want = append(want, ch.name)
			ch.pending = 1
			ch.disrupted = true
			ch.confirmed = false
		}
	}
	if h.cluster != nil {
		// go-redis reloads its slot map on MOVED/ASK and otherwise only
		// every minute (v9.22), not when a master stops answering: the
		// fresh routing the detached waiters need would keep naming a
		// dead master long after its replica took over
		// (redis/go-redis#3979). The reload is asynchronous and coalesced;
		// it repeats while the waiters' resubscriptions keep failing, so
		// it catches the new master soon after the failover.
		h.cluster.ReloadState(h.ctx)
	}
	sh.stray = nil // replies on the old connection will never come
	old := sh.ps
	if len(want) == 0 {
		delete(h.shards, sh.addr)
		h.mu.Unlock()
		_ = old.Close()
		return false
	}
	h.log.Warn("dlock: subscription connection lost; reconnecting", "err", cause)
	sh.ps = h.newPubSub()
	h.mu.Unlock()
	_ = old.Close()
	if err := h.subscribe(h.ctx, sh, want...); err != nil {
		h.log.Debug("dlock: resubscribe failed", "err", err)
	}
	return true
}

// confirm records Redis' reply on sh to a subscribe or unsubscribe
// command. It reports whether the reply confirms a subscription the hub
// gave up before (detachUnconfirmed, refuse), which sh then holds on the
// server for nobody: see dropStray.
func (h *Hub) confirm(sh *shard, s *redis.Subscription) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	unsub := s.Kind == "unsubscribe" || s.Kind == "sunsubscribe"
	if unsub && sh.stray[s.Channel] > 0 {
		if sh.stray[s.Channel]--; sh.stray[s.Channel] == 0 {
			delete(sh.stray, s.Channel)
		}
		return false
	}
	ch := h.chans[s.Channel]
	if ch == nil || ch.shard != sh {
		return !unsub
	}
	if ch.pending == 0 && unsub && ch.subscribed {
		// Redis dropped the subscription by itself (its slot moved to
		// another node): detach the channel and wake its waiters, who
		// subscribe again through fresh routing.
		h.detach(ch)
		return false
	}
	if ch.pending > 0 {
		ch.pending--
	}
	if ch.pending > 0 {
		return false
	}
	switch {
	case ch.subscribed && !ch.confirmed:
		ch.confirmed = true
		ch.settle()
		if ch.disrupted {
			ch.disrupted = false
			h.wakeAll(ch)
		}
	case !ch.subscribed && len(ch.waiters) == 0:
		delete(h.chans, ch.name)
	}
	return false
}

// dropStray unsubscribes sh from channel, whose subscription Redis
// confirmed after the hub gave it up, unless a channel of that name was
// subscribed on sh since (its own later command decides then).
func (h *Hub) dropStray(sh *shard, channel string) {
	sh.cmdMu.Lock()
	defer sh.cmdMu.Unlock()
	h.mu.Lock()
	if ch := h.chans[channel]; h.closed || h.shards[sh.addr] != sh || (ch != nil && ch.shard == sh) {
		h.mu.Unlock()
		return
	}
	if sh.stray == nil {
		sh.stray = make(map[string]int)
	}
	sh.stray[channel]++
	h.mu.Unlock()
	if err := h.unsubscribe(h.ctx, sh, channel); err != nil && h.ctx.Err() == nil {
		h.log.Debug("dlock: unsubscribe failed; reconnecting", "channel", channel, "err", err)
		_ = sh.ps.Close()
	}
}

// dispatch wakes local waiters as a release's payload asks.
func (h *Hub) dispatch(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.chans[channel]
	if ch == nil {
		return
	}
	switch payload {
	case WakeOne:
		h.wakeOne(ch, nil)
		h.wakeKey(ch, Every, "")
	case WakeAll:
		h.wakeAll(ch)
	default:
		key, grant, _ := strings.Cut(payload, " ")
		h.wakeKey(ch, key, grant)
	}
}

// wakeKey wakes the waiters registered with key, handing them grant if
// any, and those that follow every payload (Every), in one pass.
func (h *Hub) wakeKey(ch *channel, key, grant string) {
	for _, w := range ch.waiters {
		if w.key == key && grant != "" {
			w.grant = grant
		}
		if w.key == key || w.key == Every {
			signal(w)
		}
	}
}

// wakeOne wakes the oldest waiter that has no wake-up pending, other than
// skip. Waking one per release and per process keeps a release from
// sending every local waiter to Redis when only one can win.
func (h *Hub) wakeOne(ch *channel, skip *Waiter) {
	for _, w := range ch.waiters {
		if w != skip && w.key != Every && signal(w) {
			return
		}
	}
}

// detach gives a channel up: its waiters, woken, see Detached and
// subscribe again. The caller holds h.mu.
func (h *Hub) detach(ch *channel) {
	delete(h.chans, ch.name)
	ch.settle()
	h.wakeAll(ch)
}

func (h *Hub) wakeAll(ch *channel) {
	for _, w := range ch.waiters {
		signal(w)
	}
}

// signal gives w a wake-up unless it already has one untaken. The caller
// holds h.mu.
func signal(w *Waiter) bool {
	if w.woken {
		return false
	}
	w.woken = true
	Ring(w.bell)
	return true
}

// Ring rings bell, a channel of capacity one, unless it rang already and
// nobody has listened since.
func Ring(bell chan struct{}) {
	select {
	case bell <- struct{}{}:
	default:
	}
}
