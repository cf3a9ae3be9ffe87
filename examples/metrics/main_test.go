package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/redistest"
)

// TestServesDlockMetrics runs the example for a second against a real
// Redis and checks what it prints: each instrument, with the outcomes,
// the loss and the counts back at 0 that the workload makes.
func TestServesDlockMetrics(t *testing.T) {
	srv := redistest.Start(t)
	var out bytes.Buffer
	if err := run(t.Context(), config{redis: srv.Addr(), listen: "127.0.0.1:0", runFor: time.Second}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`dlock_acquire_duration_seconds_count\{dlock_kind="mutex",dlock_name="nightly-report",dlock_outcome="acquired"\} [1-9]`,
		`dlock_acquire_duration_seconds_count\{dlock_kind="mutex",dlock_name="cron:cleanup",dlock_outcome="not_acquired"\} [1-9]`,
		`dlock_acquire_duration_seconds_bucket\{dlock_kind="semaphore",dlock_name="licences",dlock_outcome="acquired",le="\+Inf"\} [1-9]`,
		`dlock_hold_duration_seconds_count\{dlock_kind="semaphore",dlock_name="licences"\} [1-9]`,
		`dlock_lease_lost_total\{dlock_kind="mutex",dlock_name="migration",dlock_reason="gone"\} 1\n`,
		`dlock_renew_failures_total\{dlock_kind="mutex",dlock_name="migration"\} 1\n`,
		`dlock_waiters\{dlock_kind="mutex",dlock_name="nightly-report"\} 0\n`,
		`dlock_held\{dlock_kind="semaphore",dlock_name="licences"\} 0\n`,
	} {
		if !regexp.MustCompile(want).Match(out.Bytes()) {
			t.Errorf("no line matching %s in:\n%s", want, out.String())
		}
	}
}
