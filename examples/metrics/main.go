// Command metrics serves dlock's metrics in the Prometheus format while
// workers contend for locks: four on a mutex, three on a semaphore of two
// licences, two skipping a cron job when another host runs it, and one
// lease an operator takes away with ForceUnlock.
//
//	go run . -redis 127.0.0.1:6379            # serves 127.0.0.1:9464/metrics
//	curl -s 127.0.0.1:9464/metrics | grep ^dlock_
//	go run . -redis 127.0.0.1:6379 -for 3s    # prints the dlock metrics after 3s
//
// The metrics come from the module dlockotel, through OpenTelemetry's
// Prometheus exporter. It lives in a module of its own, so that dlock's
// go.mod gains no dependency from it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/dlockotel"
)

// config is the command line.
type config struct {
	redis  string
	listen string
	// runFor, if set, stops the workers after that long, prints the
	// dlock metrics and returns.
	runFor time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.redis, "redis", "127.0.0.1:6379", "Redis address")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:9464", "address to serve /metrics on")
	flag.DurationVar(&cfg.runFor, "for", 0, "stop after this long and print the dlock metrics (0: serve until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// run serves the metrics and runs the workers until ctx ends or
// cfg.runFor passes; then it prints the dlock metrics to out.
func run(ctx context.Context, cfg config, out io.Writer) error {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.Background())
	// The names here are few and fixed: worth a series each.
	hooks, err := dlockotel.NewHooks(dlockotel.WithMeterProvider(meters), dlockotel.WithLockNames())
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintln(os.Stderr, "serving", url)

	rdb := redis.NewClient(&redis.Options{Addr: cfg.redis})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("no Redis at %s: %w", cfg.redis, err)
	}
	c := dlock.New(rdb, dlock.WithPrefix("dlock-metrics-example"), dlock.WithHooks(hooks))
	defer c.Close()

	wctx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.runFor > 0 {
		wctx, cancel = context.WithTimeout(ctx, cfg.runFor)
	}
	defer cancel()
	if err := work(wctx, c); err != nil {
		return err
	}
	if cfg.runFor == 0 {
		return nil
	}
	return printMetrics(url, out)
}

// work runs the workers until ctx ends.
func work(ctx context.Context, c *dlock.Client) error {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	worker := func(f func(ctx context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := f(ctx); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		}()
	}
	report := c.Mutex("nightly-report")
	for range 4 {
		worker(func(ctx context.Context) error {
			return ignoreEnd(report.Do(ctx, func(context.Context) error { return pause(ctx, 40*time.Millisecond) }))
		})
	}
	licences := c.Semaphore("licences", 2)
	for range 3 {
		worker(func(ctx context.Context) error {
			return ignoreEnd(licences.Do(ctx, 1, func(context.Context) error { return pause(ctx, 30*time.Millisecond) }))
		})
	}
	cleanup := c.Mutex("cron:cleanup")
	for range 2 {
		worker(func(ctx context.Context) error {
			l, err := cleanup.TryLock(ctx)
			switch {
			case err == nil:
				pause(ctx, 40*time.Millisecond)
				err = l.Unlock(context.WithoutCancel(ctx))
			case errors.Is(err, dlock.ErrNotAcquired): // another host runs it: skip this turn
				err = nil
			}
			return ignoreEnd(errors.Join(err, pause(ctx, 25*time.Millisecond)))
		})
	}
	// A migration whose lease an operator takes away: it is lost ("gone").
	if l, err := c.Mutex("migration", dlock.WithTTL(300*time.Millisecond)).TryLock(ctx); err == nil {
		if _, err := c.ForceUnlock(ctx, "migration"); err != nil {
			return err
		}
		select {
		case <-l.Lost():
		case <-ctx.Done():
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// pause sleeps for d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	return nil
}

// ignoreEnd drops the error of a turn that ctx's end cut short.
func ignoreEnd(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// printMetrics scrapes url and prints its dlock lines.
func printMetrics(url string, out io.Writer) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, "dlock_") {
			fmt.Fprintln(out, line)
		}
	}
	return sc.Err()
}
