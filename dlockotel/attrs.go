package dlockotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/go-dlock/dlock"
)

// The attributes of the metrics and spans.
const (
	kindKey    = attribute.Key("dlock.kind")
	sharedKey  = attribute.Key("dlock.shared")
	outcomeKey = attribute.Key("dlock.outcome")
	reasonKey  = attribute.Key("dlock.reason")
	nameKey    = attribute.Key("dlock.name")
	memberKey  = attribute.Key("dlock.member")
	fenceKey   = attribute.Key("dlock.fence")
)

// attrs makes the metrics' attribute sets.
type attrs struct {
	names bool
	// known holds, when names are left out, the set of each kind, side,
	// and outcome or reason, made once, so that a measurement makes none.
	known map[setKey]measure
}

// measure is an attribute set as the instruments' methods take it.
type measure struct {
	rec []metric.RecordOption
	add []metric.AddOption
}

func measureOf(set attribute.Set) measure {
	o := metric.WithAttributeSet(set)
	return measure{rec: []metric.RecordOption{o}, add: []metric.AddOption{o}}
}

// setKey is what a metric's attributes are made of when names are left
// out.
type setKey struct {
	kind   string
	shared bool
	extra  attribute.KeyValue // an outcome, a reason, or none
}

func newAttrs(names bool) attrs {
	a := attrs{names: names}
	if names {
		return a
	}
	extras := []attribute.KeyValue{{}}
	for _, o := range []dlock.Outcome{dlock.Acquired, dlock.NotAcquired, dlock.Canceled, dlock.Failed} {
		extras = append(extras, outcomeKey.String(string(o)))
	}
	for _, r := range []dlock.LostReason{dlock.LostGone, dlock.LostUnreachable, dlock.LostExpired} {
		extras = append(extras, reasonKey.String(string(r)))
	}
	a.known = map[setKey]measure{}
	for _, k := range []setKey{{kind: "mutex"}, {kind: "fair"}, {kind: "rw"}, {kind: "rw", shared: true}, {kind: "set"}, {kind: "semaphore"}, {kind: "election"}} {
		for _, e := range extras {
			k.extra = e
			a.known[k] = measureOf(a.set(dlock.LockInfo{Kind: k.kind, Shared: k.shared}, "", e))
		}
	}
	return a
}

// of returns the attributes of a measurement for lk (and member, a
// lease's), with extra unless it is empty.
func (a *attrs) of(lk dlock.LockInfo, member string, extra attribute.KeyValue) measure {
	if m, ok := a.known[setKey{lk.Kind, lk.Shared, extra}]; ok {
		return m
	}
	return measureOf(a.set(lk, member, extra))
}

func (a *attrs) set(lk dlock.LockInfo, member string, extra attribute.KeyValue) attribute.Set {
	kv := make([]attribute.KeyValue, 0, 5)
	kv = append(kv, kindKey.String(lk.Kind))
	if lk.Shared {
		kv = append(kv, sharedKey.Bool(true))
	}
	if extra.Key != "" {
		kv = append(kv, extra)
	}
	if a.names {
		kv = append(kv, nameKey.String(lk.Name))
		if member != "" {
			kv = append(kv, memberKey.String(member))
		}
	}
	return attribute.NewSet(kv...)
}

// spanAttrs are a span's attributes for lk, and a lease's member and
// fence when known.
func spanAttrs(lk dlock.LockInfo, member string, fence uint64) []attribute.KeyValue {
	kv := []attribute.KeyValue{kindKey.String(lk.Kind), nameKey.String(lk.Name)}
	if lk.Shared {
		kv = append(kv, sharedKey.Bool(true))
	}
	return append(kv, leaseAttrs(member, fence)...)
}

// leaseAttrs are a lease's member, if any, and fence, if known.
func leaseAttrs(member string, fence uint64) []attribute.KeyValue {
	var kv []attribute.KeyValue
	if member != "" {
		kv = append(kv, memberKey.String(member))
	}
	if fence > 0 {
		kv = append(kv, fenceKey.Int64(int64(fence)))
	}
	return kv
}
