package dlock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/go-dlock/dlock/internal/keys"
)

// Defaults of the options.
const (
	DefaultPrefix = "dlock"
	DefaultTTL    = 10 * time.Second
	// MinTTL is the shortest lease accepted.
	MinTTL = time.Millisecond
	// MaxMetadata is the longest metadata accepted, in bytes.
	MaxMetadata = 64 << 10
)

// Option configures a Client.
type Option func(*clientConfig)

type clientConfig struct {
	prefix string
	log    *slog.Logger
	hooks  *Hooks
	err    error
}

// WithPrefix sets the namespace of every key and channel the client uses.
// The default is "dlock". A prefix must be non-empty and contain no '{' or
// '}' (they would break the Redis Cluster hash tag); otherwise every call
// of the client fails with ErrInvalid.
func WithPrefix(p string) Option {
	return func(c *clientConfig) {
		if err := keys.CheckPrefix(p); err != nil {
			c.err = fmt.Errorf("%w: %w", ErrInvalid, err)
			return
		}
		c.prefix = p
	}
}

// WithLogger sets where the client reports trouble it handles by itself,
// such as a dropped subscription connection. The default discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *clientConfig) {
		if l != nil {
			c.log = l
		}
	}
}

// LockOption configures one lock.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl         time.Duration // 0: never expires
	autoRefresh bool
	stall       time.Duration // 0: off
	metadata    string
	rwMode      RWMode
	err         error
}

func defaultLockConfig() lockConfig {
	return lockConfig{ttl: DefaultTTL, autoRefresh: true, rwMode: PreferWriters}
}

func (c *lockConfig) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
}

// WithTTL sets how long a lease lives unless renewed. The default is 10s;
// at least MinTTL (1ms), and 10ms on a Redlock client. Other values make
// every call of the lock fail with ErrInvalid.
func WithTTL(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if d < MinTTL {
			c.fail("TTL %v is below the minimum %v", d, MinTTL)
			return
		}
		c.ttl = d
	}
}

// WithNoExpiry makes leases that never expire: a holder that dies leaves
// the lock held until an operator removes it (dlock unlock --force). Use it
// only where a stuck lock is better than two holders. Such a lease has no
// renewal, Refresh returns ErrInvalid, and Lost() never closes: Held tells
// whether the lease still holds the lock.
func WithNoExpiry() LockOption {
	return func(c *lockConfig) {
		c.ttl = 0
	}
}

// WithAutoRefresh turns automatic renewal on or off. The default is on:
// the lease is renewed every TTL/6 to TTL/3 (with the client's other
// leases due about then) until Unlock, and Lost() closes when a renewal
// finds it gone, or a margin before the TTL since the last renewal that
// succeeded runs out while Redis is unreachable. Off, the holder must
// call Refresh itself, and Lost() closes a margin before the TTL since
// the last renewal runs out. (A lease that a release handed over is
// renewed once, off or on: Redis keeps it for the hand-off window, which
// may be shorter or longer than its TTL, until a renewal sets the TTL.)
func WithAutoRefresh(on bool) LockOption {
	return func(c *lockConfig) {
		c.autoRefresh = on
	}
}

// WithStallTimeout makes Lock give up with ErrNotAcquired once the SAME
// holder has kept the lock for d while this caller waited. A change of
// holder restarts the clock, so a busy lock is not mistaken for a stuck
// one, and so does a try that finds it free with another waiter first. The default, 0, never gives up for this reason; d must not be
// negative.
func WithStallTimeout(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if d < 0 {
			c.fail("stall timeout %v is negative", d)
			return
		}
		c.stall = d
	}
}

// WithMetadata attaches a text to each lease, shown by Status to say who
// holds the lock (a host name and pid, a job id). The default is empty; at
// most MaxMetadata bytes.
func WithMetadata(s string) LockOption {
	return func(c *lockConfig) {
		if len(s) > MaxMetadata {
			c.fail("metadata of %d bytes exceeds %d", len(s), MaxMetadata)
			return
		}
		c.metadata = s
	}
}

// RWMode chooses whom an RWMutex favours when readers and a writer compete.
type RWMode int

// Each caller's mode is its own policy (see RWMutex): a reader's mode says
// whether it gives way to waiting writers, a writer's whether it asks
// readers to.
const (
	// PreferWriters (the default; redis-rwlock's ModePreferWriter):
	// a waiting writer stops new readers, so a stream of overlapping
	// readers cannot starve it.
	PreferWriters RWMode = iota
	// PreferReaders (redis-rwlock's ModePreferReader): readers never wait for
	// a waiting writer.
	PreferReaders
)

// String returns the mode's name.
func (m RWMode) String() string {
	switch m {
	case PreferWriters:
		return "PreferWriters"
	case PreferReaders:
		return "PreferReaders"
	}
	return fmt.Sprintf("RWMode(%d)", int(m))
}

// WithRWMode sets an RWMutex's preference. The default is PreferWriters.
// It has no effect on other primitives.
func WithRWMode(m RWMode) LockOption {
	return func(c *lockConfig) {
		if m != PreferWriters && m != PreferReaders {
			c.fail("unknown RWMode %d", int(m))
			return
		}
		c.rwMode = m
	}
}
