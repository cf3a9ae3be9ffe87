package dlock

import (
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/keys"
	"github.com/go-dlock/dlock/internal/notify"
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
	err    error // a bad option or argument, returned by every call
}

// New returns a Client on rdb. Options that are invalid, or a nil rdb, do
// not panic: every call of the client then fails with ErrInvalid. Close
// the Client when done; rdb stays open and remains the caller's.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	cfg := clientConfig{prefix: DefaultPrefix, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	c := &Client{rdb: rdb, prefix: cfg.prefix, log: cfg.log, err: cfg.err}
	if rdb == nil {
		c.err = fmt.Errorf("%w: nil redis client", ErrInvalid)
		return c
	}
	c.hub = notify.New(rdb, cfg.log)
	return c
}

// Close stops the client's shared subscription. Waiters still blocked in
// Lock return an error; leases already held stay valid until unlocked or
// expired. It leaves the Redis client open.
func (c *Client) Close() error {
	if c.hub == nil {
		return nil
	}
	return c.hub.Close()
}

// lockKeys checks a lock's name and returns its key space.
func (c *Client) lockKeys(kind, name string) (keys.Lock, error) {
	if c.err != nil {
		return keys.Lock{}, c.err
	}
	if err := keys.CheckName(name); err != nil {
		return keys.Lock{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return keys.For(c.prefix, kind, name), nil
}

// lockConfig applies opts over the defaults.
func newLockConfig(opts []LockOption) lockConfig {
	cfg := defaultLockConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}
