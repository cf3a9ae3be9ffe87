package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/notify"
	"github.com/go-dlock/dlock/internal/token"
	"github.com/go-dlock/dlock/internal/watchdog"
)

// Client binds the lock primitives to one Redis deployment: a single node,
// a Sentinel-managed master (redis.NewFailoverClient) or a Redis Cluster.
// It is safe for concurrent use. All waiters of a Client share one
// subscription connection (one per shard on a Cluster).
type Client struct {
	rdb    redis.UniversalClient
	prefix string
	log    *slog.Logger
	hub    *notify.Hub
	listen listener // registers waiters: on hub, or on every node's
	nodes  []*node  // a Redlock client's masters; nil otherwise
	err    error    // a bad option or argument, returned by every call

	giveUps *giveUps // withdrawals of failed acquisitions still running
	work    *workers // run the calls their callers may abandon (see bounded)
	// pipe and pipeOnce send the scripts of calls that come together in
	// one pipeline (nil but on a single Redis or a Sentinel-managed
	// master: see newPipeliners).
	pipe, pipeOnce *pipeliner
	// open ends, with the cause notify.ErrClosed, when the client is
	// closed: it ends the waits (see waiting) and the followers still
	// running then.
	open context.Context
	shut context.CancelCauseFunc

	// renewals watches and renews every lease of the client, from one
	// goroutine; batch sends the automatic renewals due together, one
	// round trip per shard (nil on a Redlock client).
	renewals *watchdog.Loop
	batch    *renewBatch
	// beats sends the heartbeats of the client's queued waiters, one
	// round trip per shard per period (nil on a Redlock client).
	beats *heartbeats
	// follows follows the elections observed, one follower per election
	// however many observe it.
	follows *follows
	hooks   *Hooks // nil: none
	// id starts each token the client makes (see token.Of), and names
	// the channels on which releases hand its waiters the lock
	// (keys.ClientChannel).
	id string
}

// New returns a Client on rdb. Options that are invalid, or a nil rdb, do
// not panic: every call of the client then fails with ErrInvalid. Close
// the Client when done; rdb stays open and remains the caller's.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := newClient(newClientConfig(opts))
	c.rdb, c.batch, c.beats = rdb, &renewBatch{rdb: rdb}, newHeartbeats(rdb)
	if rdb == nil {
		c.err = fmt.Errorf("%w: nil redis client", ErrInvalid)
		return c
	}
	c.pipe, c.pipeOnce = newPipeliners(rdb)
	c.hub = notify.New(rdb, c.log)
	c.listen = hubListener{c.hub}
	return c
}

// newClient is the part of a Client that does not depend on the
// deployment.
func newClient(cfg clientConfig) *Client {
	open, shut := context.WithCancelCause(context.Background())
	id, err := token.Client()
	return &Client{prefix: cfg.prefix, log: cfg.log, err: cmp.Or(cfg.err, err), giveUps: newGiveUps(cfg.log), work: newWorkers(), renewals: watchdog.NewLoop(),
		open: open, shut: shut, follows: &follows{by: map[string]*follower{}}, hooks: cfg.hooks, id: id}
}

func newClientConfig(opts []Option) clientConfig {
	cfg := clientConfig{prefix: DefaultPrefix, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		if o != nil { // an option left out, as a nil one
			o(&cfg)
		}
	}
	return cfg
}

// Close stops the client's shared subscription. Waiters still blocked in
// Lock return an error, also one whose request Redis does not answer, and
// the channels of Election.Observe close; leases already held stay valid until unlocked or
// expired. Acquisitions that failed but could not yet give up what they
// may hold in Redis get up to a second more; what is left then lapses
// with its TTL. An Unlock still waiting for its lease's turn releases all
// the same, once it comes (the lease is renewed until then). It leaves
// the Redis client open.
func (c *Client) Close() error {
	c.shut(notify.ErrClosed)
	c.giveUps.close()
	c.work.close()
	var errs []error
	if c.hub != nil {
		errs = append(errs, c.hub.Close())
	}
	// In parallel: closing a hub may wait for a dial to a node that is down.
	nodeErrs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodeErrs[i] = n.hub.Close()
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, nodeErrs...)...)
}

// oneDeployment fails, with ErrUnsupported, on a Redlock client: what
// needs one Redis deployment (every primitive but Mutex, the operator
// tools) cannot run over independent masters.
func (c *Client) oneDeployment(what string) error {
	if c.nodes != nil {
		return fmt.Errorf("%w: %s needs one Redis deployment; a Redlock client offers Mutex only", ErrUnsupported, what)
	}
	return nil
}

// lockKeys checks a lock's name and returns its key space.
func (c *Client) lockKeys(k kind, name string) (keys.Lock, error) {
	if c.err != nil {
		return keys.Lock{}, c.err
	}
	if k != kindMutex {
		if err := c.oneDeployment(k.String()); err != nil {
			return keys.Lock{}, err
		}
	}
	if err := keys.CheckName(name); err != nil {
		return keys.Lock{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return keys.For(c.prefix, string(k), name), nil
}

// lockConfig applies opts over the defaults.
func newLockConfig(opts []LockOption) lockConfig {
	cfg := defaultLockConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return cfg
}
