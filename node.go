package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/notify"
)

// node is one of a Redlock client's independent Redis masters.
type node struct {
	rdb redis.UniversalClient
	hub *notify.Hub

	mu      sync.Mutex
	resting time.Time     // no operation is sent before then
	backoff time.Duration // the last rest; doubles while the node keeps failing
}

// A node that fails rests before it is asked again: from nodeRestMin,
// doubling up to nodeRestMax while it keeps failing, so that a node that
// refuses connections is not hammered by every waiter's every try.
const (
	nodeRestMin = 50 * time.Millisecond
	nodeRestMax = 2 * time.Second
)

var (
	errNodeResting = errors.New("a Redis master failed recently; resting it")
	errNodeTimeout = errors.New("a Redis master did not answer in time")
)

// ready reports whether the node may be asked now.
func (n *node) ready() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !time.Now().Before(n.resting)
}

// record notes the outcome of an operation: a failure to get an answer
// (not an error reply from Redis) rests the node.
func (n *node) record(err error) {
	if isReply(err) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		n.backoff, n.resting = 0, time.Time{}
		return
	}
	n.backoff = min(max(2*n.backoff, nodeRestMin), nodeRestMax)
	n.resting = time.Now().Add(n.backoff)
}

// reply is one node's answer in a fan-out.
type reply[T any] struct {
	val T
	err error
}

// firstErr is the first error among replies, or nil.
func firstErr[T any](replies []reply[T]) error {
	for _, rp := range replies {
		if rp.err != nil {
			return rp.err
		}
	}
	return nil
}

// fanOut runs op on every node at once and returns their replies, by node,
// after all answered, timeout passed or ctx ended: a node that has not
// answered by then counts as failed, and its call finishes in the
// background. A
// resting node is not asked.
func fanOut[T any](ctx context.Context, nodes []*node, timeout time.Duration, op func(context.Context, *node) (T, error)) []reply[T] {
	return fanOutTo(ctx, nodes, nil, timeout, op)
}

// fanOutTo is fanOut on the nodes marked in only, resting or not (nil: on
// every node that is not resting). A node not marked replies the zero
// value: releases use it to reach exactly the nodes that may hold a share.
func fanOutTo[T any](ctx context.Context, nodes []*node, only []bool, timeout time.Duration, op func(context.Context, *node) (T, error)) []reply[T] {
	type indexed struct {
		i int
		reply[T]
	}
	out := make([]reply[T], len(nodes))
	done := make([]bool, len(nodes))
	results := make(chan indexed, len(nodes))
	pending := 0
	for i, n := range nodes {
		switch {
		case only != nil && !only[i]:
			done[i] = true
			continue
		case only == nil && !n.ready():
			out[i].err, done[i] = errNodeResting, true
			continue
		}
		pending++
		go func() {
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			v, err := op(nctx, n)
			if ctx.Err() == nil {
				// The caller giving up says nothing about the node.
				n.record(err)
			}
			results <- indexed{i, reply[T]{v, err}}
		}()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for ; pending > 0; pending-- {
		select {
		case r := <-results:
			out[r.i], done[r.i] = r.reply, true
		case <-timer.C:
			for i, d := range done {
				if !d {
					out[i].err = errNodeTimeout
					nodes[i].record(errNodeTimeout)
				}
			}
			return out
		case <-ctx.Done():
			// The caller giving up says nothing about the nodes.
			for i, d := range done {
				if !d {
					out[i].err = ctx.Err()
				}
			}
			return out
		}
	}
	return out
}
