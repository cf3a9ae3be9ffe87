package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"syscall"
)

// verbosef writes one line about a step dlock takes, "dlock: " and the
// formatted text, to stderr with -v, and nothing without. A line names
// no secret: no password, no lease token.
func (e *env) verbosef(format string, args ...any) {
	if e.verbose {
		fmt.Fprintf(e.stderr, "dlock: %s\n", fmt.Sprintf(format, args...))
	}
}

// libLog is the library's logger for a command, on stderr with the time
// and level left out: what the library reports at Error level (a failure
// it cannot return, such as an observer that must stop), and with -v
// every record from Debug up (retries, reconnections).
func (e *env) libLog() *slog.Logger {
	level := slog.LevelError
	if e.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// attempt says how hold is about to ask for a lock: once (-n), for a
// while (-w) or until it gets it.
func attempt(o *holdOpts, label string) string {
	switch {
	case o.nonblock:
		return "trying " + label + " without waiting (-n)"
	case o.timeout > 0:
		return fmt.Sprintf("waiting up to %v for %s", o.timeout, label)
	}
	return "waiting for " + label
}

// ended says how a command ended, from its Wait error: "exited with
// status 3", "was killed by signal terminated (status 143)".
func ended(err error) string {
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return "failed: " + err.Error()
	}
	status := exitStatus(err)
	if ee != nil {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("was killed by signal %v (status %d)", ws.Signal(), status)
		}
	}
	return fmt.Sprintf("exited with status %d", status)
}
