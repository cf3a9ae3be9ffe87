package notify_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-dlock/dlock/internal/notify"
	"github.com/go-dlock/dlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one redis-server with a hub on its own client and a separate
// client for publishing and inspecting the server.
type env struct {
	srv *redistest.Server
	hub *notify.Hub
	rdb *redis.Client // the hub's client
	pub *redis.Client // another client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := redistest.Start(t)
	e := &env{srv: srv, rdb: srv.Client(t), pub: srv.Client(t)}
	e.hub = notify.New(e.rdb, slog.New(slog.DiscardHandler))
	// Registered after the clients, so it runs before they are closed.
	t.Cleanup(func() {
		if err := e.hub.Close(); err != nil {
			t.Errorf("hub.Close: %v", err)
		}
	})
	return e
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) subscribe(t *testing.T, channel, key string) *notify.Waiter {
	t.Helper()
	start := time.Now()
	w, err := e.hub.Subscribe(ctxT(t, 5*time.Second), channel, key, nil)
	if err != nil {
		t.Fatalf("Subscribe(%q, %q): %v", channel, key, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Subscribe(%q) took %v; the subscription was not confirmed promptly", channel, d)
	}
	t.Cleanup(w.Close)
	return w
}

// publish publishes payload from the other client and returns the number
// of receiving connections.
func (e *env) publish(t *testing.T, channel, payload string) int64 {
	t.Helper()
	n, err := e.pub.Publish(ctxT(t, 2*time.Second), channel, payload).Result()
	if err != nil {
		t.Fatalf("PUBLISH %s %s: %v", channel, payload, err)
	}
	return n
}

// numsub returns PUBSUB NUMSUB channel.
func (e *env) numsub(t *testing.T, channel string) int64 {
	t.Helper()
	m, err := e.pub.PubSubNumSub(ctxT(t, 2*time.Second), channel).Result()
	if err != nil {
		t.Fatalf("PUBSUB NUMSUB %s: %v", channel, err)
	}
	return m[channel]
}

// pubsubConns returns the number of connections in pub/sub mode.
func (e *env) pubsubConns(t *testing.T) int {
	t.Helper()
	s, err := e.pub.Do(ctxT(t, 2*time.Second), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST TYPE pubsub: %v", err)
	}
	n := 0
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// eventually polls cond every 10ms for at most d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// woken waits at most d for a wake-up of w and takes it.
func woken(w *notify.Waiter, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case <-w.C():
			if w.Woken() {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// take takes a wake-up w was given, without waiting.
func take(w *notify.Waiter) bool {
	select {
	case <-w.C():
	default:
	}
	return w.Woken()
}

// pending reports whether w's bell rang and nobody listened since: the
// hub woke it (or closed).
func pending(w *notify.Waiter) bool { return len(w.C()) > 0 }

// settle is how long to wait before asserting that a wake-up did NOT come.
const settle = 150 * time.Millisecond

// Subscribe returns only once Redis confirmed the subscription: a PUBLISH
// right after it reaches the hub's connection and wakes the waiter.
func TestSubscribeReturnsWhenConfirmed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 20 {
		ch := fmt.Sprintf("release:%d", i)
		w := e.subscribe(t, ch, "")
		if n := e.publish(t, ch, notify.WakeOne); n != 1 {
			t.Fatalf("PUBLISH right after Subscribe(%q) reached %d connections, want 1", ch, n)
		}
		if !woken(w, time.Second) {
			t.Fatalf("waiter on %q not woken by a publish after Subscribe", ch)
		}
		// A second waiter on the already subscribed channel also returns
		// confirmed.
		w2 := e.subscribe(t, ch, "")
		if n := e.publish(t, ch, notify.WakeAll); n != 1 {
			t.Fatalf("PUBLISH reached %d connections, want 1", n)
		}
		if !woken(w, time.Second) || !woken(w2, time.Second) {
			t.Fatalf("waiters on %q not both woken by %q", ch, notify.WakeAll)
		}
	}
	if p := e.hub.PublishCommand(); p != "PUBLISH" {
		t.Errorf("PublishCommand() = %q on a single node, want PUBLISH", p)
	}
}

// "one" wakes the oldest waiter; another "one" wakes the next waiter that
// has no wake-up pending, not the first one again.
func TestWakeOneOldestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ch = "release:one"
	w := []*notify.Waiter{e.subscribe(t, ch, ""), e.subscribe(t, ch, ""), e.subscribe(t, ch, "")}

	e.publish(t, ch, notify.WakeOne)
	if !eventually(time.Second, func() bool { return pending(w[0]) }) {
		t.Fatal("oldest waiter not woken by \"one\"")
	}
	time.Sleep(settle)
	if pending(w[1]) || pending(w[2]) {
		t.Fatalf("\"one\" woke more than one waiter: pending = %v %v %v", pending(w[0]), pending(w[1]), pending(w[2]))
	}

	e.publish(t, ch, notify.WakeOne)
	if !eventually(time.Second, func() bool { return pending(w[1]) }) {
		t.Fatal("second \"one\" did not wake the second-oldest waiter")
	}
	time.Sleep(settle)
	if pending(w[2]) {
		t.Fatal("second \"one\" also woke the third waiter")
	}

	// Once the oldest consumed its wake-up, it is the one woken again.
	if !take(w[0]) {
		t.Fatal("oldest waiter lost its wake-up")
	}
	e.publish(t, ch, notify.WakeOne)
	if !eventually(time.Second, func() bool { return pending(w[0]) }) {
		t.Fatal("third \"one\" did not wake the oldest waiter, which had consumed its wake-up")
	}
	time.Sleep(settle)
	if pending(w[2]) {
		t.Fatal("third \"one\" woke the third waiter instead of the oldest free one")
	}
}

// A bell shared with other sources (a waiter's heartbeat rings it too)
// that rang for them does not count as a wake-up: "one" still goes to the
// oldest waiter, which Woken tells, and the others are left alone.
func TestSharedBellRungElsewhereStillWoken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ch = "release:shared"
	bell := make(chan struct{}, 1)
	first, err := e.hub.Subscribe(ctxT(t, 5*time.Second), ch, "", bell)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Close)
	second := e.subscribe(t, ch, "")
	notify.Ring(bell) // a heartbeat's reply, say
	if first.Woken() {
		t.Fatal("a ring from elsewhere counted as the hub's wake-up")
	}
	e.publish(t, ch, notify.WakeOne)
	if !eventually(time.Second, first.Woken) {
		t.Fatal("\"one\" did not wake the oldest waiter, whose bell had rung for something else")
	}
	time.Sleep(settle)
	if pending(second) {
		t.Fatal("\"one\" woke the second waiter: the first one's rung bell was taken for a wake-up")
	}
	if len(bell) != 1 {
		t.Fatalf("the shared bell holds %d rings, want 1 (rung, not yet listened to)", len(bell))
	}
}

// "all" wakes every waiter of the channel and no waiter of another channel.
func TestWakeAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ch = "release:all"
	ws := []*notify.Waiter{e.subscribe(t, ch, ""), e.subscribe(t, ch, "k"), e.subscribe(t, ch, "")}
	other := e.subscribe(t, "release:other", "")

	if n := e.publish(t, ch, notify.WakeAll); n != 1 {
		t.Errorf("PUBLISH reached %d connections, want 1", n)
	}
	for i, w := range ws {
		if !woken(w, time.Second) {
			t.Errorf("waiter %d not woken by \"all\"", i)
		}
	}
	time.Sleep(settle)
	if pending(other) {
		t.Error("\"all\" on one channel woke a waiter of another channel")
	}
	for i, w := range ws {
		if pending(w) {
			t.Errorf("waiter %d got a second wake-up from one \"all\"", i)
		}
	}
}

// Any other payload wakes only the waiters registered with that key.
func TestTargetedWake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ch = "release:fair"
	a, b, c := e.subscribe(t, ch, "tok-a"), e.subscribe(t, ch, "tok-b"), e.subscribe(t, ch, "tok-c")

	e.publish(t, ch, "tok-b")
	if !woken(b, time.Second) {
		t.Fatal("waiter with key tok-b not woken by payload tok-b")
	}
	time.Sleep(settle)
	if pending(a) || pending(c) {
		t.Fatalf("payload tok-b woke other waiters: a=%v c=%v", pending(a), pending(c))
	}

	e.publish(t, ch, "tok-unknown")
	time.Sleep(settle)
	if pending(a) || pending(b) || pending(c) {
		t.Fatalf("payload with no matching key woke a waiter: a=%v b=%v c=%v", pending(a), pending(b), pending(c))
	}

	e.publish(t, ch, "tok-c")
	if !woken(c, time.Second) {
		t.Fatal("waiter with key tok-c not woken by payload tok-c")
	}
	if g := c.Grant(); g != "" {
		t.Errorf("Grant after a bare wake-up = %q; want none", g)
	}

	// A payload "<key> <grant>" wakes the key's waiter and hands it the
	// grant, once.
	e.publish(t, ch, "tok-a 42 1700000000000000")
	if !woken(a, time.Second) {
		t.Fatal("waiter with key tok-a not woken by a payload granting to tok-a")
	}
	if g := a.Grant(); g != "42 1700000000000000" {
		t.Errorf("Grant = %q; want the payload after the key", g)
	}
	if g := a.Grant(); g != "" {
		t.Errorf("second Grant = %q; want it taken already", g)
	}
	if pending(b) || pending(c) {
		t.Errorf("a grant to tok-a woke other waiters: b=%v c=%v", pending(b), pending(c))
	}

	// A wake-up that came with a grant not taken is passed on neither by
	// Handoff nor by Close: the grant was for its token alone.
	e.publish(t, ch, "tok-b 43 1700000000000001")
	if !woken(b, time.Second) {
		t.Fatal("waiter with key tok-b not woken by a payload granting to tok-b")
	}
	b.Handoff()
	e.publish(t, ch, "tok-b 44 1700000000000002")
	if !eventually(time.Second, func() bool { return pending(b) }) {
		t.Fatal("waiter with key tok-b not woken by a second grant")
	}
	b.Close()
	time.Sleep(settle)
	if pending(a) || pending(c) {
		t.Errorf("a grant to tok-b not taken was passed on: a=%v c=%v", pending(a), pending(c))
	}
}

// A waiter closed while it holds an unconsumed wake-up passes it on, so a
// release is not swallowed; Handoff does the same for a consumed one.
func TestCloseAndHandoffPassWakeUpOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ch = "release:handoff"
	w1, w2, w3 := e.subscribe(t, ch, ""), e.subscribe(t, ch, ""), e.subscribe(t, ch, "")

	e.publish(t, ch, notify.WakeOne)
	if !eventually(time.Second, func() bool { return pending(w1) }) {
		t.Fatal("oldest waiter not woken")
	}
	w1.Close() // gives up without consuming its wake-up
	if !pending(w2) {
		t.Fatal("Close of a waiter holding a wake-up did not pass it to the next waiter")
	}
	if pending(w3) {
		t.Fatal("Close passed the wake-up to more than one waiter")
	}
	w1.Close() // a second Close is harmless
	if pending(w3) {
		t.Fatal("a second Close woke another waiter")
	}

	// w2 consumes its wake-up, then gives up without trying.
	if !take(w2) {
		t.Fatal("w2 lost its wake-up")
	}
	w2.Handoff()
	if !pending(w3) {
		t.Fatal("Handoff did not wake another waiter")
	}
	if pending(w2) {
		t.Fatal("Handoff woke the waiter that handed off")
	}

	// A closed waiter without a wake-up passes nothing on.
	w4 := e.subscribe(t, ch, "")
	w2.Close()
	time.Sleep(settle)
	if pending(w4) {
		t.Fatal("Close of a waiter without a wake-up woke another waiter")
	}
	// The closed waiters are no longer registered: "one" goes to w4 once
	// w3 holds a wake-up.
	e.publish(t, ch, notify.WakeOne)
	if !eventually(time.Second, func() bool { return pending(w4) }) {
		t.Fatal("\"one\" did not reach the only free waiter; a closed waiter may have swallowed it")
	}
}

// Every channel is multiplexed over one subscription connection.
func TestOneConnectionForManyChannels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const nChans, perChan = 50, 2
	ws := make([][]*notify.Waiter, nChans)
	errs := make([]error, nChans*perChan)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range nChans {
		for j := range perChan {
			wg.Add(1)
			go func() { // concurrent first subscriptions share the connection too
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				w, err := e.hub.Subscribe(ctx, fmt.Sprintf("release:%d", i), "", nil)
				errs[i*perChan+j] = err
				if err == nil {
					mu.Lock()
					ws[i] = append(ws[i], w)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	for _, list := range ws {
		for _, w := range list {
			t.Cleanup(w.Close)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := e.pubsubConns(t); n != 1 {
		t.Errorf("%d pub/sub connections for %d channels, want 1", n, nChans)
	}
	for i := range nChans {
		ch := fmt.Sprintf("release:%d", i)
		if n := e.numsub(t, ch); n != 1 {
			t.Errorf("PUBSUB NUMSUB %s = %d, want 1", ch, n)
		}
		if n := e.publish(t, ch, notify.WakeAll); n != 1 {
			t.Errorf("PUBLISH %s reached %d connections, want 1", ch, n)
		}
	}
	for i, list := range ws {
		for j, w := range list {
			if !woken(w, time.Second) {
				t.Errorf("waiter %d of channel %d not woken", j, i)
			}
		}
	}
}

// When the subscription connection is killed, the hub reconnects,
// resubscribes and wakes every waiter, since a release may have been
// missed; afterwards publishes reach the waiters again.
func TestReconnectAfterKillWakesEveryWaiter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chans := []string{"release:a", "release:b", "release:c"}
	var ws []*notify.Waiter
	for _, ch := range chans {
		ws = append(ws, e.subscribe(t, ch, ""), e.subscribe(t, ch, "key"))
	}
	if err := e.pub.Do(ctxT(t, 2*time.Second), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	for i, w := range ws {
		if !woken(w, 3*time.Second) {
			t.Fatalf("waiter %d not woken after its subscription connection was killed", i)
		}
	}
	// The wake-ups come once the subscriptions are back.
	for _, ch := range chans {
		if n := e.numsub(t, ch); n != 1 {
			t.Errorf("PUBSUB NUMSUB %s = %d after the wake-up, want 1", ch, n)
		}
	}
	for _, ch := range chans {
		if n := e.publish(t, ch, notify.WakeAll); n < 1 {
			t.Errorf("PUBLISH %s after reconnect reached %d connections", ch, n)
		}
	}
	for i, w := range ws {
		if !woken(w, time.Second) {
			t.Errorf("waiter %d not woken by a publish after reconnect", i)
		}
	}
	if !eventually(2*time.Second, func() bool { return e.pubsubConns(t) == 1 }) {
		t.Errorf("%d pub/sub connections after reconnect, want 1", e.pubsubConns(t))
	}
	// A new channel after the reconnect uses the same connection.
	w := e.subscribe(t, "release:new", "")
	if n := e.publish(t, "release:new", notify.WakeOne); n != 1 || !woken(w, time.Second) {
		t.Errorf("new channel after reconnect: PUBLISH reached %d, woken=%v", n, pending(w))
	}
	if n := e.pubsubConns(t); n != 1 {
		t.Errorf("%d pub/sub connections after a new subscription, want 1", n)
	}
}

// A restarted Redis (all subscriptions lost, connection refused for a
// while) also ends with every waiter woken and subscribed again.
func TestReconnectAfterServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w1, w2 := e.subscribe(t, "release:x", ""), e.subscribe(t, "release:y", "")
	e.srv.Restart(t)
	for i, w := range []*notify.Waiter{w1, w2} {
		if !woken(w, 3*time.Second) {
			t.Fatalf("waiter %d not woken after Redis restarted", i)
		}
	}
	if n := e.publish(t, "release:x", notify.WakeOne); n != 1 {
		t.Errorf("PUBLISH after restart reached %d connections, want 1", n)
	}
	if !woken(w1, time.Second) {
		t.Error("waiter not woken by a publish after Redis restarted")
	}
}

// Close ends the hub: waiters' bells ring and they see Closed, Subscribe
// fails with ErrClosed, and the hub's goroutines are gone.
func TestHubClose(t *testing.T) {
	// Not parallel, so that goleak sees only this test's goroutines. The
	// check is registered first so that it runs last, after the server and
	// the clients are stopped in their own cleanups.
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	e := newEnv(t)
	w1, w2 := e.subscribe(t, "release:1", ""), e.subscribe(t, "release:2", "")
	if pending(w1) || w1.Closed() {
		t.Fatal("waiter rung or Closed before the hub was closed")
	}
	start := time.Now()
	if err := e.hub.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	for i, w := range []*notify.Waiter{w1, w2} {
		if !pending(w) || !w.Closed() || w.Woken() {
			t.Errorf("waiter %d after hub.Close: rung %v, Closed %v, Woken %v; want rung and Closed, not woken", i, pending(w), w.Closed(), w.Woken())
		}
	}
	if _, err := e.hub.Subscribe(ctxT(t, time.Second), "release:1", "", nil); !errors.Is(err, notify.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if _, err := e.hub.Subscribe(ctxT(t, time.Second), "release:3", "", nil); !errors.Is(err, notify.ErrClosed) {
		t.Errorf("Subscribe of a new channel after Close: %v, want ErrClosed", err)
	}
	if err := e.hub.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	w1.Close() // closing waiters after the hub is harmless
	if !eventually(2*time.Second, func() bool { return e.pubsubConns(t) == 0 }) {
		t.Errorf("%d pub/sub connections after Close, want 0", e.pubsubConns(t))
	}
}

// A hub that never subscribed closes without error and leaves nothing.
func TestCloseUnusedHub(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	srv := redistest.Start(t)
	h := notify.New(srv.Client(t), slog.New(slog.DiscardHandler))
	if err := h.Close(); err != nil {
		t.Errorf("Close of an unused hub: %v", err)
	}
	if _, err := h.Subscribe(ctxT(t, time.Second), "release:1", "", nil); !errors.Is(err, notify.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
}

// silentClient returns a client to srv with no read timeout, so that it
// waits for a reply for as long as Redis does not answer (go-redis heeds
// no ctx then), and a bell (capacity one) rung whenever it opens a
// connection.
func silentClient(t *testing.T, srv *redistest.Server) (*redis.Client, chan struct{}) {
	t.Helper()
	dialed := make(chan struct{}, 1)
	rdb := srv.Client(t, func(o *redis.Options) {
		o.ReadTimeout = -1
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := new(net.Dialer).DialContext(ctx, network, addr)
			if err == nil {
				notify.Ring(dialed)
			}
			return cn, err
		}
	})
	return rdb, dialed
}

// closeWithin closes hub and fails t if that takes longer than d. Redis,
// paused, is resumed then, so that the test can end.
func closeWithin(t *testing.T, srv *redistest.Server, hub *notify.Hub, d time.Duration) {
	t.Helper()
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		_ = hub.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Logf("Close returned after %v", time.Since(start))
	case <-time.After(d):
		srv.Resume(t)
		t.Fatalf("hub.Close still blocked %v after it was called, Redis silent", d)
	}
}

// Close returns while a Subscribe waits for Redis to answer the handshake
// of the subscription connection it opened, on a client with no read
// timeout: nothing but Redis' answer ends that wait, and it holds the
// shard's command lock. The Subscribe ends once Redis answers, and the
// connection is closed then, leaving nothing behind.
func TestCloseWhileSubscribeWaitsForSilentRedis(t *testing.T) {
	// Not parallel, so that goleak sees only this test's goroutines.
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	srv := redistest.Start(t)
	rdb, dialed := silentClient(t, srv)
	pub := srv.Client(t)
	hub := notify.New(rdb, slog.New(slog.DiscardHandler))
	srv.Pause(t)
	subscribed := make(chan error, 1)
	go func() {
		w, err := hub.Subscribe(context.Background(), "release:silent", "", nil)
		if err == nil {
			w.Close()
		}
		subscribed <- err
	}()
	select {
	case <-dialed: // its HELLO waits for Redis, under the command lock
	case <-time.After(5 * time.Second):
		srv.Resume(t)
		t.Fatal("Subscribe opened no connection")
	}
	closeWithin(t, srv, hub, 10*time.Second)
	srv.Resume(t)
	select {
	case err := <-subscribed:
		if !errors.Is(err, notify.ErrClosed) {
			t.Errorf("Subscribe during Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe still blocked 5s after Redis answered again")
	}
	e := &env{srv: srv, pub: pub}
	if !eventually(2*time.Second, func() bool { return e.pubsubConns(t) == 0 }) {
		t.Errorf("%d pub/sub connections after Close, want 0", e.pubsubConns(t))
	}
}

// Close returns while the receive loop waits for Redis to answer the
// handshake of the connection it opened in place of one that fell silent,
// on a client with no read timeout.
func TestCloseWhileReconnectWaitsForSilentRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb, dialed := silentClient(t, srv)
	hub := notify.New(rdb, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = hub.Close() })
	w, err := hub.Subscribe(ctxT(t, 5*time.Second), "release:silent", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	<-dialed // the connection it subscribed on
	srv.Pause(t)
	select {
	case <-dialed: // silent for two idle checks: the loop reconnects
	case <-time.After(15 * time.Second):
		srv.Resume(t)
		t.Fatal("the receive loop opened no new connection while Redis was silent")
	}
	closeWithin(t, srv, hub, 10*time.Second)
	srv.Resume(t)
}

// After its last waiter leaves, a channel stays subscribed for the linger
// time (so steady contention does not pay a SUBSCRIBE per waiter), then is
// unsubscribed; a later waiter subscribes it again.
func TestLingerThenUnsubscribe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ch = "release:linger"
	w := e.subscribe(t, ch, "")
	w.Close()
	if n := e.numsub(t, ch); n != 1 {
		t.Fatalf("PUBSUB NUMSUB = %d right after the last waiter left, want 1 (linger)", n)
	}
	// A waiter arriving within the linger time needs no new SUBSCRIBE and
	// restarts the linger time when it leaves.
	time.Sleep(time.Second)
	w = e.subscribe(t, ch, "")
	if n := e.publish(t, ch, notify.WakeOne); n != 1 || !woken(w, time.Second) {
		t.Fatalf("waiter during linger: PUBLISH reached %d, woken=%v", n, pending(w))
	}
	w.Close()
	left := time.Now()
	if testing.Short() {
		return
	}
	time.Sleep(4 * time.Second) // still within the linger time
	if n := e.numsub(t, ch); n != 1 {
		t.Fatalf("PUBSUB NUMSUB = %d %v after the last waiter left, want 1 (linger is 5s)", n, time.Since(left))
	}
	if !eventually(3*time.Second, func() bool { return e.numsub(t, ch) == 0 }) {
		t.Fatalf("channel still subscribed %v after its last waiter left", time.Since(left))
	}
	if d := time.Since(left); d < 5*time.Second {
		t.Errorf("channel unsubscribed %v after its last waiter left, before the linger time", d)
	}
	// Subscribing again works and is confirmed before Subscribe returns.
	w = e.subscribe(t, ch, "")
	if n := e.publish(t, ch, notify.WakeOne); n != 1 || !woken(w, time.Second) {
		t.Fatalf("waiter after unsubscribe: PUBLISH reached %d, woken=%v", n, pending(w))
	}
	if n := e.pubsubConns(t); n != 1 {
		t.Errorf("%d pub/sub connections, want 1", n)
	}
}

// A connection break while waiters subscribe to new channels must not stop
// the hub: the receive loop's restart and Subscribe both take h.mu and the
// shard's cmdMu. (Before commit 970d037 they took them in opposite orders,
// and this test deadlocked the hub within a few dozen subscribes.)
func TestReconnectWhileSubscribingDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	pub := srv.Client(t)
	hub := notify.New(srv.Client(t), slog.New(slog.DiscardHandler))
	stuck := false
	t.Cleanup(func() {
		if !stuck { // a deadlocked hub would block Close forever
			_ = hub.Close()
		}
	})
	base, err := hub.Subscribe(ctxT(t, 5*time.Second), "release:base", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !stuck {
			base.Close()
		}
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var subscribes atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				w, err := hub.Subscribe(ctx, fmt.Sprintf("release:%d:%d", g, i), "", nil)
				cancel()
				if err == nil {
					w.Close()
				}
				subscribes.Add(1)
			}
		}()
	}
	kills := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); kills++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = pub.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
		cancel()
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		stuck = true
		t.Fatalf("Subscribe/Close blocked for good after %d connection kills and %d subscribes: the hub deadlocked",
			kills, subscribes.Load())
	}
	t.Logf("%d connection kills, %d subscribes", kills, subscribes.Load())

	// The hub recovered: the old waiter was woken by the reconnects and
	// hears releases again.
	if !woken(base, 3*time.Second) {
		t.Fatal("waiter not woken by the reconnects")
	}
	e := &env{srv: srv, hub: hub, pub: pub}
	if !eventually(3*time.Second, func() bool { return e.numsub(t, "release:base") == 1 }) {
		t.Fatal("channel not subscribed again after the reconnects")
	}
	e.publish(t, "release:base", notify.WakeOne)
	if !woken(base, time.Second) {
		t.Fatal("waiter not woken by a publish after the reconnects")
	}
}

// Join adds a waiter to a confirmed subscription without network traffic,
// and nothing otherwise.
func TestJoin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const ch = "release:join"
	if w := e.hub.Join(ch, "", nil); w != nil {
		w.Close()
		t.Fatal("Join of a channel the hub does not subscribe returned a waiter")
	}
	first := e.subscribe(t, ch, "")
	w := e.hub.Join(ch, "tok", nil)
	if w == nil {
		t.Fatal("Join of a confirmed subscription returned nil")
	}
	t.Cleanup(w.Close)
	if w.Detached() || first.Detached() {
		t.Error("Detached() is true for waiters of a live subscription")
	}
	if n := e.publish(t, ch, "tok"); n != 1 || !woken(w, time.Second) {
		t.Fatalf("joined waiter: PUBLISH reached %d, woken=%v", n, pending(w))
	}
	if pending(first) {
		t.Error("targeted wake of the joined waiter woke the other one")
	}
	e.publish(t, ch, notify.WakeAll)
	if !woken(w, time.Second) || !woken(first, time.Second) {
		t.Fatal("\"all\" did not wake both the subscribed and the joined waiter")
	}
	if err := e.hub.Close(); err != nil {
		t.Fatal(err)
	}
	if w := e.hub.Join(ch, "", nil); w != nil {
		t.Error("Join after Close returned a waiter")
	}
}

// A subscription confirmed too late (Redis stalled) lets Subscribe return
// after its bounded wait; the late confirmation then wakes the waiter,
// since a release may have gone unheard, and the channel works again.
func TestLateConfirmationWakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.subscribe(t, "release:warm", "") // the connection is up
	e.srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			e.srv.Resume(t)
		}
	}()
	type sub struct {
		w   *notify.Waiter
		err error
	}
	subscribed := make(chan sub, 1)
	start := time.Now()
	go func() {
		w, err := e.hub.Subscribe(context.Background(), "release:late", "", nil)
		subscribed <- sub{w, err}
	}()
	time.Sleep(200 * time.Millisecond)
	if j := e.hub.Join("release:late", "", nil); j != nil {
		j.Close()
		t.Error("Join of a subscription not confirmed yet returned a waiter")
	}
	var res sub
	select {
	case res = <-subscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe did not return while Redis was stalled")
	}
	took := time.Since(start)
	w, err := res.w, res.err
	if err != nil {
		t.Fatalf("Subscribe while Redis is stalled: %v; want a waiter relying on its own expiry", err)
	}
	t.Cleanup(w.Close)
	if took < 1500*time.Millisecond || took > 3*time.Second {
		t.Errorf("Subscribe returned after %v while Redis was stalled; want after its bounded wait (2s)", took)
	}
	if pending(w) {
		t.Fatal("waiter woken before the subscription was confirmed")
	}
	e.srv.Resume(t)
	resumed = true
	if !woken(w, 2*time.Second) {
		t.Fatal("late confirmation did not wake the waiter")
	}
	if n := e.publish(t, "release:late", notify.WakeOne); n != 1 || !woken(w, time.Second) {
		t.Fatalf("after the late confirmation: PUBLISH reached %d, woken=%v", n, pending(w))
	}
}

// A subscription Redis refuses with an error reply other than NOPERM
// (BUSY, while a script runs long) is asked for again on a new
// connection: left unconfirmed on the old one, its channel went unheard
// for as long as that connection lasted.
func TestSubscriptionRefusedWhileBusyResubscribes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.subscribe(t, "release:warm", "") // the connection is up
	if err := e.pub.ConfigSet(ctxT(t, 2*time.Second), "busy-reply-threshold", "50").Err(); err != nil {
		t.Fatal(err)
	}
	busy := e.srv.Client(t)
	go busy.Eval(context.Background(), "while true do end", nil) // until SCRIPT KILL
	if !eventually(5*time.Second, func() bool {
		return strings.HasPrefix(fmt.Sprint(e.pub.Ping(ctxT(t, time.Second)).Err()), "BUSY")
	}) {
		t.Fatal("Redis not busy")
	}
	w, err := e.hub.Subscribe(ctxT(t, 5*time.Second), "release:busy", "", nil)
	if err != nil {
		t.Fatalf("Subscribe while Redis is busy: %v; want a waiter relying on its own expiry", err)
	}
	t.Cleanup(w.Close)
	if err := e.pub.Do(ctxT(t, 2*time.Second), "SCRIPT", "KILL").Err(); err != nil {
		t.Fatal(err)
	}
	// Subscribed again once the connection, restarted with a backoff while
	// Redis was busy, is back: a release is heard then.
	if !eventually(5*time.Second, func() bool {
		take(w) // the wake-up of the resubscription, if come
		// (BUSY still, until the killed script notices it is.)
		n, err := e.pub.Publish(ctxT(t, time.Second), "release:busy", notify.WakeOne).Result()
		return err == nil && n == 1 && woken(w, 100*time.Millisecond)
	}) {
		t.Fatal("the channel refused while Redis was busy was not subscribed again")
	}
}

// TestExpiredSubscribeLeavesConnectionAlone: a Subscribe whose ctx has
// passed its deadline (it waited for a worker,
// or for another subscription's command) must not break the shared
// connection: every other waiter of the client would be woken for
// nothing, and its subscription dropped and redone.
func TestExpiredSubscribeLeavesConnectionAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.subscribe(t, "chan-a", "")
	before, err := e.pub.Do(ctxT(t, time.Second), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	if w2, err := e.hub.Subscribe(ctx, "chan-b", "", nil); err == nil {
		w2.Close()
	}
	if woken(w, 500*time.Millisecond) {
		t.Errorf("a Subscribe on another channel with an expired ctx woke a waiter of chan-a")
	}
	after, _ := e.pub.Do(ctxT(t, time.Second), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if id := func(s string) string { return s[:min(len(s), 12)] }; id(before) != id(after) {
		t.Errorf("the subscription connection was replaced:\nbefore %s\nafter  %s", before, after)
	}
}
