package dlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/dlockotel"
	"github.com/go-dlock/dlock/internal/redistest"
)

// sdk is the OpenTelemetry SDK as a program sets it up, with an
// in-memory metric reader and span recorder.
type sdk struct {
	reader *sdkmetric.ManualReader
	meters *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tracer *sdktrace.TracerProvider
}

func newSDK(t testing.TB) *sdk {
	s := &sdk{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	s.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	s.tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	t.Cleanup(func() {
		_ = s.meters.Shutdown(context.Background())
		_ = s.tracer.Shutdown(context.Background())
	})
	return s
}

// client returns a dlock client on a redis-server of its own, with
// dlockotel's hooks on s and opts, and the server.
func (s *sdk) client(t *testing.T, opts ...dlockotel.Option) (*dlock.Client, *redistest.Server) {
	t.Helper()
	h, err := dlockotel.NewHooks(append([]dlockotel.Option{dlockotel.WithMeterProvider(s.meters), dlockotel.WithTracerProvider(s.tracer)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	c := dlock.New(srv.Client(t), dlock.WithHooks(h))
	t.Cleanup(func() { c.Close() })
	return c, srv
}

// collect reads the metrics, by name.
func (s *sdk) collect(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// points lists a metric's data points as "attrs=value" lines, sorted:
// value a sum, or a histogram's count.
func points(data metricdata.Aggregation) []string {
	var out []string
	line := func(set attribute.Set, v any) {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
		}
		out = append(out, fmt.Sprintf("%s=%v", strings.Join(kv, ","), v))
	}
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			line(p.Attributes, p.Value)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			line(p.Attributes, p.Count)
		}
	}
	sort.Strings(out)
	return out
}

// wantPoints fails t unless metric name has exactly the data points want
// (see points).
func wantPoints(t *testing.T, m map[string]metricdata.Aggregation, name string, want ...string) {
	t.Helper()
	if got := points(m[name]); !slices.Equal(got, want) {
		t.Errorf("%s:\n  got  %q\n  want %q", name, got, want)
	}
}

// eventually polls cond every 10ms for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 5s: %s", what)
		}
	}
}

// TestMetricsOfAKnownSequence runs three acquisitions, a timeout and a
// lease lost to FLUSHALL, with waiters rising and falling back to 0, and
// checks every instrument.
func TestMetricsOfAKnownSequence(t *testing.T) {
	t.Parallel()
	s := newSDK(t)
	c, srv := s.client(t)
	ctx := t.Context()
	m := c.Mutex("jobs", dlock.WithTTL(600*time.Millisecond))

	first, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	timedOut := make(chan error, 1)
	go func() {
		tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := m.Lock(tctx)
		timedOut <- err
	}()
	third := make(chan *dlock.Lease, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		third <- l
	}()
	waiters := func(n int) func() bool {
		return func() bool {
			return slices.Equal(points(s.collect(t)["dlock.waiters"]), []string{fmt.Sprintf("dlock.kind=mutex=%d", n)})
		}
	}
	eventually(t, "dlock.waiters rises to 2", waiters(2))
	wantPoints(t, s.collect(t), "dlock.held", "dlock.kind=mutex=1")
	if err := <-timedOut; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a 300ms timeout = %v", err)
	}
	eventually(t, "dlock.waiters falls to 1", waiters(1))

	if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	<-second.Lost()
	l := <-third
	eventually(t, "dlock.waiters falls to 0", waiters(0))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	got := s.collect(t)
	wantPoints(t, got, "dlock.acquire.duration", "dlock.kind=mutex,dlock.outcome=acquired=3", "dlock.kind=mutex,dlock.outcome=canceled=1")
	wantPoints(t, got, "dlock.hold.duration", "dlock.kind=mutex=3")
	wantPoints(t, got, "dlock.lease.lost", "dlock.kind=mutex,dlock.reason=gone=1")
	wantPoints(t, got, "dlock.renew.failures", "dlock.kind=mutex=1")
	wantPoints(t, got, "dlock.waiters", "dlock.kind=mutex=0")
	wantPoints(t, got, "dlock.held", "dlock.kind=mutex=0")

	acquired := got["dlock.acquire.duration"].(metricdata.Histogram[float64])
	for _, p := range acquired.DataPoints {
		if o, _ := p.Attributes.Value("dlock.outcome"); o.AsString() == "canceled" && (p.Sum < 0.3 || p.Sum > 3) {
			t.Errorf("the timed-out acquisition's duration: %vs, want 0.3s or a little more", p.Sum)
		}
	}
	hold := got["dlock.hold.duration"].(metricdata.Histogram[float64])
	if max, _ := hold.DataPoints[0].Max.Value(); max < 0.3 {
		t.Errorf("longest hold %vs; the second lease was held while a 300ms timeout passed", max)
	}
}

// TestLockNamesOnlyWhenAsked checks that dlock.name and dlock.member are
// on the metrics with WithLockNames only, and on spans always.
func TestLockNamesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, names := range []bool{false, true} {
		s := newSDK(t)
		var opts []dlockotel.Option
		if names {
			opts = append(opts, dlockotel.WithLockNames())
		}
		c, _ := s.client(t, opts...)
		set := c.MutexSet("gpus")
		if err := set.Add(t.Context(), "gpu0"); err != nil {
			t.Fatal(err)
		}
		l, err := set.TryAcquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := s.collect(t)
		if names {
			wantPoints(t, got, "dlock.hold.duration", "dlock.kind=set,dlock.member=gpu0,dlock.name=gpus=1")
			wantPoints(t, got, "dlock.acquire.duration", "dlock.kind=set,dlock.name=gpus,dlock.outcome=acquired=1")
		} else {
			wantPoints(t, got, "dlock.hold.duration", "dlock.kind=set=1")
			wantPoints(t, got, "dlock.acquire.duration", "dlock.kind=set,dlock.outcome=acquired=1")
		}
		for _, sp := range s.spans.Ended() {
			a := attribute.NewSet(sp.Attributes()...)
			if v, _ := a.Value("dlock.name"); v.AsString() != "gpus" {
				t.Errorf("span %s without dlock.name=gpus: %v", sp.Name(), sp.Attributes())
			}
		}
	}
}

// TestSpans checks the spans' parents: the caller's for an acquisition,
// its wait's the acquisition's, the caller's for a release and a
// Refresh, and for an automatic renewal a trace of its own, linked to
// the acquisition.
func TestSpans(t *testing.T) {
	t.Parallel()
	s := newSDK(t)
	c, _ := s.client(t)
	ctx, request := s.tracer.Tracer("test").Start(t.Context(), "request")
	// A TTL that the 250ms below covers an automatic renewal of (at
	// TTL/6 to TTL/3), and that a lease handed to the waiter (counted
	// from its refused try, at the start) outlives under load.
	m := c.Mutex("jobs", dlock.WithTTL(600*time.Millisecond))

	held, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		waited <- err
	}()
	time.Sleep(250 * time.Millisecond) // an automatic renewal, and a wait
	if err := held.Refresh(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex("").TryLock(ctx); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("TryLock of an empty name = %v", err)
	}
	request.End()

	spans := s.spans.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
	}
	root := request.SpanContext()
	acquires := byName["dlock.acquire"]
	if len(acquires) != 3 {
		t.Fatalf("%d dlock.acquire spans, want 3 (TryLock, Lock, the bad name)", len(acquires))
	}
	for _, sp := range acquires {
		if sp.Parent().SpanID() != root.SpanID() {
			t.Errorf("dlock.acquire's parent is %v, want the caller's span", sp.Parent().SpanID())
		}
	}
	waits := byName["dlock.wait"]
	if len(waits) != 1 || !slices.ContainsFunc(acquires, func(a sdktrace.ReadOnlySpan) bool {
		return a.SpanContext().SpanID() == waits[0].Parent().SpanID()
	}) {
		t.Errorf("dlock.wait spans %d, want 1, a child of a dlock.acquire", len(waits))
	}
	if w := waits[0].EndTime().Sub(waits[0].StartTime()); w < 200*time.Millisecond {
		t.Errorf("dlock.wait lasted %v; the waiter waited 250ms", w)
	}
	releases := byName["dlock.release"]
	if len(releases) != 2 {
		t.Errorf("%d dlock.release spans, want 2", len(releases))
	}
	for _, sp := range releases {
		if sp.Parent().SpanID() != root.SpanID() {
			t.Errorf("dlock.release's parent is %v, want the caller's span", sp.Parent().SpanID())
		}
	}
	var auto, asked int
	for _, sp := range byName["dlock.renew"] {
		switch {
		case sp.Parent().SpanID() == root.SpanID():
			asked++
		case !sp.Parent().IsValid() && sp.SpanContext().TraceID() != root.TraceID():
			auto++
			if len(sp.Links()) != 1 || !slices.ContainsFunc(acquires, func(a sdktrace.ReadOnlySpan) bool {
				return a.SpanContext().Equal(sp.Links()[0].SpanContext)
			}) {
				t.Errorf("an automatic dlock.renew's links %v; want the acquisition's span", sp.Links())
			}
		default:
			t.Errorf("a dlock.renew span with parent %v in trace %v", sp.Parent(), sp.SpanContext().TraceID())
		}
	}
	if asked != 1 || auto < 1 {
		t.Errorf("dlock.renew spans: %d children of the Refresh caller (want 1), %d automatic roots (want 1 or more)", asked, auto)
	}
	failed := slices.IndexFunc(acquires, func(a sdktrace.ReadOnlySpan) bool { return a.Status().Code == codes.Error })
	if failed < 0 || !slices.ContainsFunc(acquires[failed].Attributes(), func(kv attribute.KeyValue) bool {
		return kv.Key == "dlock.outcome" && kv.Value.AsString() == "error"
	}) {
		t.Error("the acquisition of a bad name has no span with an error status and dlock.outcome=error")
	}
	if !trace.SpanFromContext(ctx).SpanContext().Equal(root) {
		t.Error("the caller's context changed")
	}
}

// TestNoHooksNoMeasurements checks that a client without the hooks
// records nothing, even where dlockotel's instruments exist.
func TestNoHooksNoMeasurements(t *testing.T) {
	t.Parallel()
	s := newSDK(t)
	if _, err := dlockotel.NewHooks(dlockotel.WithMeterProvider(s.meters), dlockotel.WithTracerProvider(s.tracer)); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	c := dlock.New(srv.Client(t))
	defer c.Close()
	l, err := c.Mutex("jobs").TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for name, data := range s.collect(t) {
		if p := points(data); len(p) > 0 {
			t.Errorf("%s recorded %q without the hooks", name, p)
		}
	}
	if n := len(s.spans.Ended()); n > 0 {
		t.Errorf("%d spans without the hooks", n)
	}
}

// TestCanceledSpanTellsLastTry: README (Observability) says of a
// Lock that gives up when its ctx ends while Redis is down: "the error
// (and the span) says what the last try met": an event on the span.
func TestCanceledSpanTellsLastTry(t *testing.T) {
	s := newSDK(t)
	h, err := dlockotel.NewHooks(dlockotel.WithMeterProvider(s.meters), dlockotel.WithTracerProvider(s.tracer))
	if err != nil {
		t.Fatal(err)
	}
	// A refused dial, tried once: each of Lock's tries fails at once.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	defer rdb.Close()
	c := dlock.New(rdb, dlock.WithHooks(h))
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = c.Mutex("jobs").Lock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last try") {
		t.Fatalf("Lock = %v", err)
	}
	t.Logf("Lock's error: %v", err)
	for _, sp := range s.spans.Ended() {
		if sp.Name() != "dlock.acquire" {
			continue
		}
		said := sp.Status().Description
		for _, ev := range sp.Events() {
			for _, a := range ev.Attributes {
				said += " " + a.Value.String()
			}
		}
		if !strings.Contains(said, "no reply") && !strings.Contains(said, "refused") {
			t.Errorf("dlock.acquire span of a Lock canceled while Redis was down: status %+v, events %d; it does not say what the last try met", sp.Status(), len(sp.Events()))
		}
		return
	}
	t.Fatal("no dlock.acquire span")
}

// TestNilOptions: no panics on bad input (README): as dlock ignores nil
// options (TestNilLeaseAndOptions) and a nil logger (WithLogger),
// NewHooks ignores a nil option and nil providers (the global ones stay).
func TestNilOptions(t *testing.T) {
	srv := redistest.Start(t)
	for name, opt := range map[string]dlockotel.Option{
		"nil option":              nil,
		"WithMeterProvider(nil)":  dlockotel.WithMeterProvider(nil),
		"WithTracerProvider(nil)": dlockotel.WithTracerProvider(nil),
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("NewHooks(%s) panicked: %v", name, p)
				}
			}()
			h, err := dlockotel.NewHooks(opt)
			if err != nil {
				return // an error is fine: no panic
			}
			c := dlock.New(srv.Client(t), dlock.WithHooks(h))
			defer c.Close()
			l, err := c.Mutex("nil-opt").TryLock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
		}()
	}
}

// TestRefreshGivenUpCountsAlike: a Refresh sent to a Redis that
// does not answer, whose caller gives up, is a failed renewal (the
// watchdog marks it failed, Refresh returns ctx's error, the lease is
// still held) whether the caller's ctx timed out or was cancelled; with
// go-redis honouring ctx (ContextTimeoutEnabled), dlockotel counts both
// in dlock.renew.failures: only an automatic renewal's context.Canceled
// means "abandoned because the lease ended".
func TestRefreshGivenUpCountsAlike(t *testing.T) {
	s := newSDK(t)
	h, err := dlockotel.NewHooks(dlockotel.WithMeterProvider(s.meters), dlockotel.WithTracerProvider(s.tracer))
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	c := dlock.New(srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }), dlock.WithHooks(h))
	defer c.Close()
	ctx := t.Context()
	givenUp := func(name string, rctx context.Context) {
		l, err := c.Mutex(name, dlock.WithTTL(10*time.Second), dlock.WithAutoRefresh(false)).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		srv.Pause(t)
		err = l.Refresh(rctx, 10*time.Second)
		eventually(t, "the renewal's span ends", func() bool { return len(s.spans.Started()) == len(s.spans.Ended()) })
		srv.Resume(t)
		select {
		case <-l.Lost():
			t.Fatalf("%s: lease lost", name)
		default:
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock after the given-up Refresh: %v (the lease was still held)", name, err)
		}
		var status string
		for _, sp := range s.spans.Ended() {
			set := attribute.NewSet(sp.Attributes()...)
			if v, _ := set.Value("dlock.name"); sp.Name() == "dlock.renew" && v.AsString() == name {
				status = sp.Status().Code.String()
			}
		}
		t.Logf("%s: Refresh = %v; dlock.renew.failures now %q; its span's status %s", name, err, points(s.collect(t)["dlock.renew.failures"]), status)
	}
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	givenUp("timed-out", tctx)
	cancel()
	afterTimeout := points(s.collect(t)["dlock.renew.failures"])
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(300*time.Millisecond, cancel)
	givenUp("cancelled", cctx)
	afterCancel := points(s.collect(t)["dlock.renew.failures"])
	if !slices.Equal(afterTimeout, []string{"dlock.kind=mutex=1"}) || !slices.Equal(afterCancel, []string{"dlock.kind=mutex=2"}) {
		t.Errorf("dlock.renew.failures %q after a Refresh given up by its ctx's deadline, %q after one given up by cancel; want 1 then 2", afterTimeout, afterCancel)
	}
}
