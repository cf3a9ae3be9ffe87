package dlock_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// hook watches a go-redis client for tests. It counts the commands sent for
// dlock (one per round trip, one per command of a pipeline; a new
// connection's handshake, HELLO, CLIENT..., is paid once per connection and
// not counted) and the connections dialled. Once armed, it runs act in
// place of the next command that match selects (every script when match is
// nil), to lose, repeat or fail one request.
type hook struct {
	n     atomic.Int64
	trips atomic.Int64 // round trips: a command alone or a whole pipeline
	// marked counts the commands sent alone, not in a pipeline, that have
	// an argument ending with mark (when mark is set): say, the tries of
	// waiters with mark as their metadata.
	mark   string
	marked atomic.Int64
	// markedPiped counts those sent in a pipeline.
	markedPiped atomic.Int64
	dials       atomic.Int64
	mu          sync.Mutex
	names       []string // the commands counted, for failure messages
	keys        []int    // the keys count of each script counted (see evalKeys)

	armed atomic.Bool
	match func(cmd redis.Cmder) bool
	act   func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error
}

var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

func (h *hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.count(cmd) {
			h.trips.Add(1)
		}
		if h.mark != "" && slices.ContainsFunc(cmd.Args(), h.marks) {
			h.marked.Add(1)
		}
		if h.act != nil && h.selects(cmd) && h.armed.CompareAndSwap(true, false) {
			return h.act(ctx, cmd, next)
		}
		return next(ctx, cmd)
	}
}

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		counted := false
		for _, cmd := range cmds {
			counted = h.count(cmd) || counted
			if h.mark != "" && slices.ContainsFunc(cmd.Args(), h.marks) {
				h.markedPiped.Add(1)
			}
		}
		if counted {
			h.trips.Add(1)
		}
		return next(ctx, cmds)
	}
}

// markedAll counts the commands with mark sent alone or in a pipeline.
func (h *hook) markedAll() int64 { return h.marked.Load() + h.markedPiped.Load() }

// marks reports whether a command's argument carries mark: it ends with
// it, as an Election's metadata argument ends with a campaigner's
// WithMetadata text.
func (h *hook) marks(arg any) bool {
	s, ok := arg.(string)
	return ok && strings.HasSuffix(s, h.mark)
}

func (h *hook) selects(cmd redis.Cmder) bool {
	if h.match == nil {
		return isEval(cmd)
	}
	return h.match(cmd)
}

// count counts cmd unless it is part of a handshake, and reports whether
// it did.
func (h *hook) count(cmd redis.Cmder) bool {
	if handshake[cmd.Name()] {
		return false
	}
	h.n.Add(1)
	h.mu.Lock()
	h.names = append(h.names, cmd.Name())
	if isEval(cmd) {
		n, err := strconv.Atoi(fmt.Sprint(cmd.Args()[2]))
		if err != nil {
			n = -1
		}
		h.keys = append(h.keys, n)
	}
	h.mu.Unlock()
	return true
}

// evalKeys returns the keys count of each script (EVAL, EVALSHA) counted
// since the last call.
func (h *hook) evalKeys() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.keys
	h.keys = nil
	return out
}

// settle waits until no round trip has been counted for 100 ms (at most
// 5 s): a waiter that registered before its channel's subscription was
// confirmed tries once more after subscribing (a release may have come
// in between), and a test that counts the round trips of what follows
// must not count that try.
func (h *hook) settle(t *testing.T) {
	t.Helper()
	last := h.trips.Load()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		now := h.trips.Load()
		if now == last {
			return
		}
		last = now
	}
	t.Fatal("round trips still being counted after 5s")
}

// Load returns the number of commands counted.
func (h *hook) Load() int64 { return h.n.Load() }

// String lists the commands counted.
func (h *hook) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.names, " ")
}

func isEval(cmd redis.Cmder) bool {
	n := strings.ToLower(cmd.Name())
	return n == "evalsha" || n == "eval"
}

// isTry selects the scripts with more than 3 arguments after the keys
// count: the acquire scripts, not releases or status reads.
func isTry(cmd redis.Cmder) bool { return isEval(cmd) && len(cmd.Args()) > 5 }

// sentTwice runs a command twice, as go-redis does when it retries one
// whose reply was lost (a read timeout or a reset after the write); with
// failFirst the caller sees the first one's transient error instead.
func sentTwice(failFirst bool) func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	return func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		_ = next(ctx, cmd) // applied; its reply is lost
		if failFirst {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return next(ctx, cmd)
	}
}

// broken fails a command without sending it, after calling before.
func broken(before func()) func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	return func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		before()
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

// lostToCancel runs a command on the server, then calls cancel and reports
// the cancellation, as if ctx ended while the reply was on its way.
func lostToCancel(cancel func()) func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	return func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		_ = next(context.Background(), cmd)
		cancel()
		cmd.SetErr(context.Canceled)
		return context.Canceled
	}
}

// delayedBy calls fn, then sends the command.
func delayedBy(fn func()) func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	return func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		fn()
		return next(ctx, cmd)
	}
}
