// Package dlockotel measures dlock's locks with OpenTelemetry: how long
// callers wait for a lock, how long holders hold it, which leases are lost
// and why, and how many callers wait and hold right now, as metrics; and
// the acquisitions, waits, releases and renewals as spans, children of the
// caller's span, so a slow request shows its lock wait.
//
// It implements dlock.Hooks, and lives in a module of its own so that
// dlock itself depends on go-redis alone:
//
//	hooks, err := dlockotel.NewHooks()
//	if err != nil { ... }
//	client := dlock.New(rdb, dlock.WithHooks(hooks))
//
// # Metrics
//
// Every instrument carries dlock.kind, the lock's kind as Status.Kind
// gives it ("mutex", "fair", "rw", "set", "semaphore", "election"), and
// dlock.shared=true for the read side of an RWMutex.
//
//	dlock.acquire.duration  histogram, s   from the call to its return, with
//	                                       dlock.outcome: acquired,
//	                                       not_acquired, canceled or error
//	dlock.hold.duration     histogram, s   from acquisition to release or loss
//	dlock.lease.lost        counter        leases lost, with dlock.reason: gone,
//	                                       unreachable or expired (dlock.LostReason)
//	dlock.renew.failures    counter        renewals that failed or found the
//	                                       lease gone (an automatic one abandoned
//	                                       because the lease ended is not
//	                                       counted; a Refresh its caller gave
//	                                       up is)
//	dlock.waiters           up-down        callers waiting for a lock now
//	dlock.held              up-down        leases held now
//
// Lock names are left out of metrics unless WithLockNames is given: their
// number is the user's to bound. With it, dlock.name is the lock's name and
// dlock.member a MutexSet member's.
//
// # Spans
//
// dlock.acquire spans each acquisition, with a dlock.wait child for the
// time it waited; dlock.release spans an Unlock; dlock.renew spans each
// renewal. They carry dlock.kind, dlock.name (always: a trace's size does
// not grow with the names' number), dlock.member and dlock.fence where
// known, and an error status when the call failed with an error other
// than dlock.ErrNotAcquired: an acquisition refused (not_acquired) or
// whose ctx ended (canceled) is no error, and a canceled one records what
// its last try met as an exception event. A Refresh's renewal is
// a child of its caller's span; an automatic renewal starts a trace of its
// own, linked to the acquisition's span, so that a lease held for hours
// does not grow its acquirer's trace.
package dlockotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-dlock/dlock"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/go-dlock/dlock/dlockotel"

// Option configures NewHooks.
type Option func(*config)

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	names   bool
}

// WithMeterProvider sets where the metrics go; the default, also for a
// nil mp, is the global provider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.meters = mp
		}
	}
}

// WithTracerProvider sets where the spans go; the default, also for a
// nil tp, is the global provider (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tracers = tp
		}
	}
}

// WithLockNames adds the lock's name (dlock.name) and a MutexSet member's
// (dlock.member) to the metrics' attributes. Every name then makes series
// of its own: use it when the names are few.
func WithLockNames() Option {
	return func(c *config) { c.names = true }
}

// NewHooks returns hooks, to pass to dlock.WithHooks, that record a
// client's locks with OpenTelemetry (see the package documentation). It
// fails only if an instrument cannot be made.
func NewHooks(opts ...Option) (dlock.Hooks, error) {
	cfg := config{meters: otel.GetMeterProvider(), tracers: otel.GetTracerProvider()}
	for _, o := range opts {
		if o != nil { // as dlock's own options: a nil one sets nothing
			o(&cfg)
		}
	}
	r, err := newRecorder(cfg)
	if err != nil {
		return dlock.Hooks{}, err
	}
	return dlock.Hooks{
		AcquireStart: r.acquireStart,
		AcquireEnd:   r.acquireEnd,
		WaitStart:    r.waitStart,
		WaitEnd:      r.waitEnd,
		ReleaseStart: r.releaseStart,
		ReleaseEnd:   r.releaseEnd,
		RenewStart:   r.renewStart,
		RenewEnd:     r.renewEnd,
		LeaseEnd:     r.leaseEnd,
	}, nil
}

// recorder holds the instruments and the tracer.
type recorder struct {
	tracer  trace.Tracer
	attrs   attrs
	acquire metric.Float64Histogram
	hold    metric.Float64Histogram
	lost    metric.Int64Counter
	renew   metric.Int64Counter
	waiters metric.Int64UpDownCounter
	held    metric.Int64UpDownCounter
}

// durationBounds are the histograms' bucket bounds, in seconds: from half
// a millisecond (an uncontended lock on a near Redis) to an hour (a long
// job's hold).
var durationBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

func newRecorder(cfg config) (*recorder, error) {
	m := cfg.meters.Meter(ScopeName)
	r := &recorder{tracer: cfg.tracers.Tracer(ScopeName), attrs: newAttrs(cfg.names)}
	var errs [6]error
	r.acquire, errs[0] = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an acquisition (TryLock, Lock, Acquire, Campaign...) to its return."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	r.hold, errs[1] = m.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, from its acquisition to its release or loss."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	r.lost, errs[2] = m.Int64Counter("dlock.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost before their release, by reason."))
	r.renew, errs[3] = m.Int64Counter("dlock.renew.failures", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals of a lease that failed or found it gone."))
	r.waiters, errs[4] = m.Int64UpDownCounter("dlock.waiters", metric.WithUnit("{caller}"),
		metric.WithDescription("Callers waiting for a lock."))
	r.held, errs[5] = m.Int64UpDownCounter("dlock.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held."))
	return r, errors.Join(errs[:]...)
}

func (r *recorder) acquireStart(ctx context.Context, lk dlock.LockInfo) context.Context {
	return r.start(ctx, "dlock.acquire", lk, "", 0)
}

func (r *recorder) acquireEnd(ctx context.Context, lk dlock.LockInfo, res dlock.AcquireResult) {
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(outcomeKey.String(string(res.Outcome)))
		if res.Outcome == dlock.Acquired {
			span.SetAttributes(leaseAttrs(res.Lease.Member, res.Lease.Fence)...)
		}
	}
	if res.Outcome == dlock.Canceled && res.Err != nil {
		// Not a failure of the span, but what the last try met (Redis
		// unreachable, say) is in the error: recorded as an event.
		span.RecordError(res.Err)
	}
	endSpan(span, res.Outcome == dlock.Failed, res.Err)
	r.acquire.Record(ctx, res.Wait.Seconds(), r.attrs.of(lk, "", outcomeKey.String(string(res.Outcome))).rec...)
	if res.Outcome == dlock.Acquired {
		r.held.Add(ctx, 1, r.attrs.of(lk, res.Lease.Member, attribute.KeyValue{}).add...)
	}
}

func (r *recorder) waitStart(ctx context.Context, lk dlock.LockInfo) context.Context {
	r.waiters.Add(ctx, 1, r.attrs.of(lk, "", attribute.KeyValue{}).add...)
	return r.start(ctx, "dlock.wait", lk, "", 0)
}

func (r *recorder) waitEnd(ctx context.Context, lk dlock.LockInfo) {
	trace.SpanFromContext(ctx).End()
	r.waiters.Add(ctx, -1, r.attrs.of(lk, "", attribute.KeyValue{}).add...)
}

func (r *recorder) releaseStart(ctx context.Context, l dlock.LeaseInfo) context.Context {
	return r.start(ctx, "dlock.release", l.LockInfo, l.Member, l.Fence)
}

func (r *recorder) releaseEnd(ctx context.Context, _ dlock.LeaseInfo, err error) {
	endSpan(trace.SpanFromContext(ctx), err != nil, err)
}

// renewStart starts a renewal's span: a child of a Refresh caller's, or a
// new trace linked to the acquisition's span for an automatic renewal.
func (r *recorder) renewStart(ctx context.Context, l dlock.LeaseInfo, auto bool) context.Context {
	if auto {
		ctx = context.WithValue(ctx, automatic{}, true)
		return r.start(ctx, "dlock.renew", l.LockInfo, l.Member, l.Fence, trace.WithNewRoot(), trace.WithLinks(trace.LinkFromContext(ctx)))
	}
	return r.start(ctx, "dlock.renew", l.LockInfo, l.Member, l.Fence)
}

// automatic marks the context of an automatic renewal (see renewEnd).
type automatic struct{}

// start starts a span called name for lk and, if known, a lease's member
// and fence. The attributes are set once the span is known to record, so
// that a span not sampled costs no attribute.
func (r *recorder) start(ctx context.Context, name string, lk dlock.LockInfo, member string, fence uint64, opts ...trace.SpanStartOption) context.Context {
	ctx, span := r.tracer.Start(ctx, name, opts...)
	if span.IsRecording() {
		span.SetAttributes(spanAttrs(lk, member, fence)...)
	}
	return ctx
}

func (r *recorder) renewEnd(ctx context.Context, l dlock.LeaseInfo, err error) {
	// An automatic renewal cancelled because its lease ended (Unlock, or
	// a loss counted already) failed nobody; a Refresh its caller gave up
	// (context.Canceled too) failed.
	failed := err != nil && !(errors.Is(err, context.Canceled) && ctx.Value(automatic{}) != nil)
	endSpan(trace.SpanFromContext(ctx), failed, err)
	if failed {
		r.renew.Add(ctx, 1, r.attrs.of(l.LockInfo, l.Member, attribute.KeyValue{}).add...)
	}
}

func (r *recorder) leaseEnd(ctx context.Context, l dlock.LeaseInfo, held time.Duration, lost dlock.LostReason) {
	set := r.attrs.of(l.LockInfo, l.Member, attribute.KeyValue{})
	r.hold.Record(ctx, held.Seconds(), set.rec...)
	r.held.Add(ctx, -1, set.add...)
	if lost != "" {
		r.lost.Add(ctx, 1, r.attrs.of(l.LockInfo, l.Member, reasonKey.String(string(lost))).add...)
	}
}

// endSpan ends span, with an error status when failed.
func endSpan(span trace.Span, failed bool, err error) {
	if failed && err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
