// Package keys names the Redis keys and channels of every lock.
//
// All keys and the channel of one lock share one Redis Cluster hash tag, the
// escaped lock name, so a script can touch them all on any deployment:
//
//	<prefix>:{<escaped name>}:<kind>[:<part>]
//
// Lock names are arbitrary bytes. The escaping replaces '%', '{' and '}' by
// %25, %7B and %7D, which keeps the first '}' after the tag's '{' the end of
// the tag and is reversible, so tools can show names back to people.
package keys

import (
	"errors"
	"fmt"
	"strings"
)

// MaxName is the longest lock name accepted, in bytes.
const MaxName = 4096

// Kinds of lock; each keeps its keys apart from the others of the same name.
const (
	KindMutex = "mutex"
	KindFair  = "fair"
	KindRW    = "rw"
	KindSet   = "set"
	KindSem   = "semaphore"
	KindElect = "election"
)

// ErrName reports a lock name that is empty or longer than MaxName bytes.
var ErrName = errors.New("lock name must be 1 to 4096 bytes")

// ErrPrefix reports a prefix that cannot be used as a namespace.
var ErrPrefix = errors.New("prefix must be non-empty and contain no '{' or '}'")

var escaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
var unescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// CheckPrefix reports whether p can be used as a key namespace.
func CheckPrefix(p string) error {
	if p == "" || strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%w: %q", ErrPrefix, p)
	}
	return nil
}

// CheckName reports whether name can be a lock name.
func CheckName(name string) error {
	if len(name) == 0 || len(name) > MaxName {
		return fmt.Errorf("%w (got %d bytes)", ErrName, len(name))
	}
	return nil
}

// Lock is the key space of one lock.
type Lock struct {
	base    string // "<prefix>:{<escaped name>}:<kind>"
	channel string // base + ":wake", made once: every acquisition sends it
}

// For returns the key space of the lock of the given kind and name. The
// prefix and name must have passed CheckPrefix and CheckName.
func For(prefix, kind, name string) Lock {
	base := prefix + ":{" + escaper.Replace(name) + "}:" + kind
	return Lock{base: base, channel: base + ":wake"}
}

// Key returns the main key of the lock.
func (l Lock) Key() string { return l.base }

// Part returns the key of the named part of the lock (a queue, a counter).
func (l Lock) Part(part string) string { return l.base + ":" + part }

// Channel returns the channel on which releases of the lock are announced.
func (l Lock) Channel() string { return l.channel }

// SideChannel returns a second release channel of the lock, for waiters
// that must be woken apart from those on Channel (an RWMutex's writers).
func (l Lock) SideChannel(side string) string { return l.Channel() + ":" + side }

// MemberChannel returns the channel on which releases of one member of a
// MutexSet are announced. It is apart from the set's Channel so that a
// waiter for one member is neither woken by, nor swallows, the release of
// another.
func (l Lock) MemberChannel(member string) string { return l.Channel() + ":" + member }

// ClientChannel returns the channel on which the lock's hand-offs and
// wake-ups for the waiters of one client (its id, see token.Client) are
// sent, beside channel, one of the lock's release channels: a release
// that hands the lock to a waiter wakes that waiter's process alone, not
// every process that waits for the lock. It is apart from MemberChannel
// and SideChannel ('~' where they have ':'), and in the lock's slot.
func ClientChannel(channel, id string) string { return channel + "~" + id }

// Parse splits a key made by For or Part back into its kind and lock name.
// It reports false for keys that dlock did not make under prefix.
func Parse(prefix, key string) (kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok {
		return "", "", false
	}
	tag, rest, ok := strings.Cut(rest, "}:")
	if !ok {
		return "", "", false
	}
	kind, _, _ = strings.Cut(rest, ":")
	return kind, unescaper.Replace(tag), true
}
