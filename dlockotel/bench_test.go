package dlockotel_test

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/dlockotel"
	"github.com/go-dlock/dlock/internal/redistest"
)

// BenchmarkTryLockUnlock measures what the hooks cost a TryLock and its
// Unlock on a local Redis: without hooks, with dlockotel's metrics (a
// no-op tracer), and with its metrics and spans (the SDK, sampling every
// span, exporting none).
//
//	cd dlockotel && go test -run '^$' -bench TryLockUnlock -benchmem
func BenchmarkTryLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	for _, bc := range []struct {
		name  string
		hooks func(s *sdk) []dlock.Option
	}{
		{"hooks=none", func(*sdk) []dlock.Option { return nil }},
		{"hooks=metrics", func(s *sdk) []dlock.Option {
			return otelHooks(b, dlockotel.WithMeterProvider(s.meters), dlockotel.WithTracerProvider(noop.NewTracerProvider()))
		}},
		{"hooks=metrics+spans", func(s *sdk) []dlock.Option {
			return otelHooks(b, dlockotel.WithMeterProvider(s.meters), dlockotel.WithTracerProvider(sdktrace.NewTracerProvider()))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := newSDK(b)
			c := dlock.New(srv.Client(b), bc.hooks(s)...)
			defer c.Close()
			m := c.Mutex("bench")
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				l, err := m.TryLock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func otelHooks(b *testing.B, opts ...dlockotel.Option) []dlock.Option {
	h, err := dlockotel.NewHooks(opts...)
	if err != nil {
		b.Fatal(err)
	}
	return []dlock.Option{dlock.WithHooks(h)}
}
