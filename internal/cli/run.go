package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-dlock/dlock"
)

// holdOpts are the flags shared by `run` and `set run`.
type holdOpts struct {
	nonblock  bool
	timeout   time.Duration
	ttl       time.Duration
	metadata  string
	conflict  int
	killAfter time.Duration
}

func (o *holdOpts) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVarP(&o.nonblock, "nonblock", "n", false, "fail at once if the lock is held")
	f.DurationVarP(&o.timeout, "timeout", "w", 0, "give up waiting after this long (e.g. 30s; 0 waits for ever)")
	f.DurationVar(&o.ttl, "ttl", dlock.DefaultTTL, "lease TTL; the lease is renewed every TTL/3 while the command runs")
	f.StringVar(&o.metadata, "metadata", defaultMetadata(), "who holds the lock, shown by dlock status")
	f.IntVarP(&o.conflict, "conflict-exit-code", "E", ExitConflict, "exit status when the lock is not obtained")
	f.DurationVar(&o.killAfter, "kill-after", 10*time.Second, "after a lost lease, SIGKILL the command this long after SIGTERM")
	// Flags end at the lock's name, as with flock(1): what follows is the
	// command's.
	f.SetInterspersed(false)
}

func (o *holdOpts) check() error {
	switch {
	case o.nonblock && o.timeout > 0:
		return usage("--nonblock and --timeout exclude each other")
	case o.timeout < 0:
		return usage("--timeout must not be negative")
	case o.ttl < dlock.MinTTL:
		return usage("--ttl must be at least %v", dlock.MinTTL)
	case o.killAfter < 0:
		return usage("--kill-after must not be negative")
	case o.conflict < 0 || o.conflict > 255:
		return usage("--conflict-exit-code must be 0 to 255")
	}
	return nil
}

func (o *holdOpts) lockOptions() []dlock.LockOption {
	return []dlock.LockOption{dlock.WithTTL(o.ttl), dlock.WithMetadata(o.metadata)}
}

// splitCommand splits NAME [--] COMMAND [ARGS...], or returns a usage
// error that gives synopsis. Flags stop at NAME, so a "--" after it
// arrives here; so does a flag put after NAME, which is refused before
// the lock is taken rather than run as the command.
func splitCommand(args []string, synopsis string) (name string, argv []string, err error) {
	if len(args) < 2 {
		return "", nil, usage("usage: %s", synopsis)
	}
	name, argv = args[0], args[1:]
	switch {
	case argv[0] == "--":
		argv = argv[1:]
	case strings.HasPrefix(argv[0], "-"):
		return "", nil, usage("%s after %s: flags go before the name (%s); a command whose name starts with - goes after --", argv[0], name, synopsis)
	}
	if len(argv) == 0 {
		return "", nil, usage("usage: %s", synopsis)
	}
	return name, argv, nil
}

func defaultMetadata() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

func (e *env) runCmd() *cobra.Command {
	var o holdOpts
	var shared, exclusive, fair bool
	cmd := &cobra.Command{
		Use:   "run [flags] NAME [--] COMMAND [ARGS...]",
		Short: "Run a command while holding a lock, like flock(1) across machines",
		Long: `run takes the lock NAME, runs COMMAND with its standard input and output,
renews the lock while COMMAND runs, releases it when COMMAND exits, and
exits with COMMAND's status. COMMAND sees DLOCK_NAME and DLOCK_FENCE (the
lease's fencing token) in its environment.

NAME is a mutex; -s and -x take instead the read and the write side of the
read/write lock NAME, and --fair a fair mutex NAME: each is a lock of its
own, apart from the others of that name, so every host that takes NAME
must take it the same way (-s and -x together).

If the lock is not obtained (-n finds it held, or -w's time runs out before
it is obtained), run exits with the --conflict-exit-code (default 1); without
-n or -w, run waits until it gets the lock. If the
lease is lost while COMMAND runs (Redis unreachable or the lock removed),
COMMAND gets SIGTERM, then SIGKILL after --kill-after, and run exits 75.
SIGINT, SIGTERM and SIGHUP sent to run are passed on to COMMAND; the lock
is released after COMMAND exits. Usage errors exit 2.

run writes to stderr only its errors and, if the lease is lost, that it
stops COMMAND. With -v it logs each step there, a line each: the Redis it
connects to, the lock it waits for, the lease's fence and TTL and how long
it waited, COMMAND's pid and exit status, and the release.

Flags go before NAME; everything after NAME is the command.`,
		Example: `  dlock run nightly-report -- ./report.sh
  dlock run -n cron:cleanup -- ./cleanup.sh      # skip if another host runs it
  dlock run -w 30s --fair deploy -- ./deploy.sh
  dlock run -s catalog -- ./read-catalog.sh      # shared (read) lock
  dlock run -x catalog -- ./rebuild-catalog.sh   # excludes -s and -x holders`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if n := count(shared, exclusive, fair); n > 1 {
				return usage("--shared, --exclusive and --fair exclude each other")
			}
			name, argv, err := splitCommand(args, "dlock run [flags] NAME -- COMMAND [ARGS...]")
			if err != nil {
				return err
			}
			c, done, err := e.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var l dlock.Locker
			t := target{what: printable(name), label: "mutex " + printable(name)}
			switch {
			case shared:
				l = c.RWMutex(name, o.lockOptions()...).RLocker()
				t.label = "rw lock " + printable(name) + " (read side)"
			case exclusive:
				l = c.RWMutex(name, o.lockOptions()...)
				t.label = "rw lock " + printable(name) + " (write side)"
			case fair:
				l = c.FairMutex(name, o.lockOptions()...)
				t.label = "fair mutex " + printable(name)
			default:
				l = c.Mutex(name, o.lockOptions()...)
			}
			t.acquire = func(ctx context.Context) (*dlock.Lease, error) {
				if o.nonblock {
					return l.TryLock(ctx)
				}
				return l.Lock(ctx)
			}
			t.env = func(*dlock.Lease) []string { return []string{"DLOCK_NAME=" + name} }
			return e.hold(cmd.Context(), &o, t, argv)
		},
	}
	o.register(cmd)
	cmd.Flags().BoolVarP(&shared, "shared", "s", false, "take the read side of the read/write lock NAME: many -s holders, none with -x")
	cmd.Flags().BoolVarP(&exclusive, "exclusive", "x", false, "take the write side of the read/write lock NAME: one holder, none with -s")
	cmd.Flags().BoolVar(&fair, "fair", false, "take the fair mutex NAME: holders in arrival order")
	return cmd
}

// brokenPipes takes the SIGPIPEs that hold catches (one channel, however
// often hold runs in a process), and drops them.
var brokenPipes = make(chan os.Signal, 1)

// count returns how many of flags are set.
func count(flags ...bool) int {
	n := 0
	for _, f := range flags {
		if f {
			n++
		}
	}
	return n
}

// target is the lock a command holds while COMMAND runs.
type target struct {
	what    string // the lock in errors: "job", "a member of set pool"
	label   string // the lock in -v lines, if what does not say its kind: "fair mutex job"
	acquire func(context.Context) (*dlock.Lease, error)
	env     func(*dlock.Lease) []string // COMMAND's variables besides DLOCK_FENCE
	// held names, in -v lines, what a lease got holds, if label does not
	// say it all: "member gpu-1 of set gpus", "election boss (term 7)".
	held func(*dlock.Lease) string
}

// cutShort reports whether err ended a wait at -w's deadline, perhaps
// with a try on its way whose reply had not come by then: that says
// nothing of Redis unless Redis does not answer now either.
func cutShort(err error) bool {
	return errors.Is(err, dlock.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded)
}

// hold acquires t's lease, runs argv while holding it, with DLOCK_FENCE
// and t's variables in its environment, and returns the exit the command
// line should have.
func (e *env) hold(ctx context.Context, o *holdOpts, t target, argv []string) error {
	sigs := make(chan os.Signal, 4)
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		// A signal dlock was started ignoring (SIGHUP under nohup, SIGINT
		// in a shell's background job) stays ignored, for dlock and for
		// the command, as under flock(1): catching it would give the
		// command its default action (exec resets caught signals) and
		// pass it on to a command that was meant never to get it.
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	defer signal.Stop(sigs)
	// A stderr nobody reads any more (a "| logger" that died) must not kill
	// dlock as it writes that the lease was lost, or its last error line:
	// caught for the rest of the process, SIGPIPE makes such writes fail
	// instead. (The command gets the default action back.)
	signal.Notify(brokenPipes, syscall.SIGPIPE)

	if t.label == "" {
		t.label = t.what
	}
	e.verbosef("%s", attempt(o, t.label))
	start := time.Now()
	lease, sig, err := waitFor(ctx, o, t.acquire, sigs)
	waited := time.Since(start).Round(time.Millisecond)
	if err != nil || sig != nil {
		e.verbosef("%s not acquired after %v", t.label, waited)
	}
	if sig != nil {
		return &ExitError{Code: 128 + int(sig.(syscall.Signal)), Err: fmt.Errorf("interrupted while waiting for %s", t.what)}
	}
	if unreachable(err) && !(cutShort(err) && reach(ctx, e.rdbs) == nil) {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("cannot reach Redis; %s not obtained: %w", t.what, err)}
	}
	if errors.Is(err, dlock.ErrNotAcquired) {
		msg := fmt.Sprintf("%s is held by another process; not obtained", t.what)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The last try had no reply in time: held or not, unknown.
			msg = fmt.Sprintf("%s not obtained within %v: no answer from Redis in time; gave up", t.what, o.timeout)
		case errors.Is(err, context.DeadlineExceeded):
			msg = fmt.Sprintf("%s not obtained within %v; gave up", t.what, o.timeout)
		}
		return &ExitError{Code: o.conflict, Err: errors.New(msg)}
	}
	if err != nil {
		return failed(err)
	}
	held := t.label
	if t.held != nil {
		held = t.held(lease)
	}
	e.verbosef("acquired %s: fence %d, ttl %v, waited %v", held, lease.Fence(), o.ttl, waited)

	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = e.stdin, e.stdout, e.stderr
	child.Env = append(os.Environ(), t.env(lease)...)
	child.Env = append(child.Env, "DLOCK_FENCE="+strconv.FormatUint(lease.Fence(), 10))
	g := newGroup(child)
	exited, err := g.start()
	if err != nil {
		e.unlock(lease, held)
		return &ExitError{Code: 127, Err: fmt.Errorf("cannot run %s: %w", argv[0], err)}
	}
	command := printable(argv[0])
	e.verbosef("started %s (pid %d)", command, child.Process.Pid)

	var (
		lost  bool
		lostc = lease.Lost() // nil once taken in: a closed channel is always ready
		kill  <-chan time.Time
		werr  error
	)
supervise:
	for {
		select {
		case werr = <-exited:
			break supervise
		case s := <-sigs:
			if g.forward(s.(syscall.Signal)) {
				e.verbosef("passed signal %v on to %s", s, command)
			}
		case <-lostc:
			lostc = nil
			select {
			case werr = <-exited: // it finished in time after all
				break supervise
			default:
			}
			lost = true
			g.signal(syscall.SIGTERM)
			fmt.Fprintf(e.stderr, "dlock: lease on %s lost; stopping %s (SIGTERM, SIGKILL in %v)\n", t.what, argv[0], o.killAfter)
			kill = time.After(o.killAfter)
		case <-kill:
			e.verbosef("%s still runs %v after SIGTERM; sending SIGKILL", command, o.killAfter)
			g.signal(syscall.SIGKILL)
		}
	}
	e.verbosef("%s %s", command, ended(werr))
	// Nothing the command started may outlive the lock.
	g.stopRest(o.killAfter)
	uerr := e.unlock(lease, held)
	if lost {
		return &ExitError{Code: ExitLost, Err: fmt.Errorf("lost the lock %s while the command ran; it was stopped", t.what)}
	}
	if code := exitStatus(werr); code != 0 {
		return &ExitError{Code: code}
	}
	if uerr != nil {
		return failed(uerr) // not -E's code: the command ran
	}
	return nil
}

// waitFor acquires, giving up on -w's timeout or on a signal.
func waitFor(ctx context.Context, o *holdOpts, acquire func(context.Context) (*dlock.Lease, error),
	sigs <-chan os.Signal) (*dlock.Lease, os.Signal, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	type result struct {
		l   *dlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := acquire(ctx)
		got <- result{l, err}
	}()
	select {
	case r := <-got:
		return r.l, nil, r.err
	case s := <-sigs:
		cancel()
		if r := <-got; r.err == nil {
			// Taken just as the signal came: give it back.
			uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ucancel()
			_ = r.l.Unlock(uctx)
		}
		return nil, s, nil
	}
}

// unlock releases l, which holds what held names (for -v lines).
func (e *env) unlock(l *dlock.Lease, held string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.verbosef("releasing %s", held)
	if err := l.Unlock(ctx); err != nil {
		e.verbosef("releasing %s failed: %s", held, message(err))
		return fmt.Errorf("releasing %s: %w", l.Name(), err)
	}
	e.verbosef("released %s", held)
	return nil
}

// exitStatus returns a shell's view of how a command ended: its exit
// status, or 128 + the signal that killed it.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}
