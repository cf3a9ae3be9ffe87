// Package cli is the dlock command: flock(1) for many machines, a pool
// runner, and a readable status of locks in Redis. Run takes the arguments
// and writers and returns an error carrying the exit code, so tests drive
// it in process as well as through the binary.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/go-dlock/dlock"
)

// Exit codes besides a command's own.
const (
	ExitConflict = 1 // the lock was not obtained (default of -E)
	ExitUsage    = 2 // bad arguments, flags or Redis URL
	// ExitUnavailable: Redis could not be reached (EX_UNAVAILABLE), so a
	// cron job can tell "Redis down" from "held elsewhere".
	ExitUnavailable = 69
	ExitLost        = 75 // the lease was lost while the command ran (EX_TEMPFAIL)
	// ExitNoPerm: Redis refused the credentials or the ACL refused a
	// command (EX_NOPERM): a misconfiguration, not a lock held elsewhere.
	ExitNoPerm = 77
)

// DefaultRedis is the Redis URL used without --redis or $DLOCK_REDIS.
const DefaultRedis = "redis://127.0.0.1:6379"

// ExitError is an error that ends dlock with Code. Code 0 with a nil Err
// is not an error; a non-nil Err is printed to stderr by Run.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode returns the process exit code for an error returned by Run: 0
// for nil, the ExitError's code, else 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	return 1
}

func usage(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// parent makes cmd, a command that only holds subcommands (set, sem), a
// usage error when called without one or with one it does not have,
// rather than its help and exit 0: a mistyped "set rnu" in a cron job
// must not pass for a success.
func parent(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var names []string
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
			}
		}
		if len(args) == 0 {
			return usage("%s needs a command: %s", cmd.Name(), strings.Join(names, ", "))
		}
		return usage("%s: unknown command %q; one of: %s", cmd.Name(), args[0], strings.Join(names, ", "))
	}
	return cmd
}

// env is what every command shares: the streams and the connection flags.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	redisURL       string
	redisFile      string
	tlsCA          string
	tlsCert        string
	tlsKey         string
	cluster        bool
	redlock        bool
	prefix         string
	verbose        bool // -v: log each step on stderr (verbosef)
	// rdbs are the Redis clients connect opened, for asking again
	// whether Redis answers (see hold).
	rdbs []redis.UniversalClient
}

// Run runs the dlock command line args (without the program name). Errors
// are printed to stderr, prefixed "dlock: ", and returned.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	// go-redis logs failed dials itself; the error dlock prints says it.
	quietOnce.Do(func() { redis.SetLogger(quiet{}) })
	if _, ok := stderr.(*os.File); !ok {
		// A file takes concurrent writes as they come, and a command run
		// by dlock writes to it directly; any other writer is shared by
		// dlock's lines, the library's logger and the copy of the
		// command's stderr, each in a goroutine of its own.
		stderr = &lockedWriter{w: stderr}
	}
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := e.root()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return nil
	}
	var ee *ExitError
	if !errors.As(err, &ee) {
		// Cobra's own errors are about flags and arguments.
		err = &ExitError{Code: ExitUsage, Err: err}
		errors.As(err, &ee)
	}
	if ee.Err != nil {
		fmt.Fprintln(stderr, "dlock:", message(ee.Err))
	}
	return err
}

// message is err's text without the library's own "dlock: " prefixes,
// which Run's would double.
func message(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "dlock: "), ": dlock: ", ": ")
}

func (e *env) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "dlock",
		Short: "Distributed locks on Redis for shell scripts: flock(1) for many machines",
		Long: `dlock runs commands while holding distributed locks on Redis, so that
processes on many machines never run the same critical section at once.

The Redis server is given by --redis or $DLOCK_REDIS (default ` + DefaultRedis + `),
or read from the file named by --redis-file or $DLOCK_REDIS_FILE:
redis:// or rediss:// (TLS) URLs, with user:password@ for ACLs. Several
comma-separated URLs (or lines of the file), or --cluster, mean a Redis
Cluster. With --redlock, the URLs are independent masters (3 or 5) and a
lock is held on a majority of them (Redlock: plain mutexes only).

Keep a password off the command line, where other users of the machine
can read it (ps, /proc): put the URL in $DLOCK_REDIS or in a file only you
can read. dlock never prints it.

dlock writes its errors to stderr, a line each starting "dlock: ". With
-v (--verbose, any subcommand), it also logs there each step it takes, a
line each starting "dlock: ": the Redis it connects to (password hidden),
the lock it waits for, the fence, TTL and wait of the lease it gets, the
command's pid and exit status, the release; and it shows the library's
records down to debug level (retries, reconnections), not only errors.
Without -v, a command that succeeds leaves stderr to COMMAND.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// An empty value (a variable unset in a script) is not "not
			// given": falling back to the default Redis would lock there.
			for _, f := range []string{"redis", "redis-file"} {
				if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed && fl.Value.String() == "" {
					return usage("--%s is empty", f)
				}
			}
			return nil
		},
	}
	// Defaults from the environment are resolved when connecting, not shown
	// in --help: a URL may carry a password.
	root.PersistentFlags().StringVar(&e.redisURL, "redis", "", "Redis URL(s), comma-separated for a cluster (default $DLOCK_REDIS, else "+DefaultRedis+")")
	root.PersistentFlags().StringVar(&e.redisFile, "redis-file", "", "read the Redis URL(s) from this file, keeping a password off the command line (default $DLOCK_REDIS_FILE)")
	root.PersistentFlags().StringVar(&e.tlsCA, "tls-ca", "", "PEM file of the CA certificates that sign the Redis server's, for rediss:// (default $DLOCK_TLS_CA, else the system's)")
	root.PersistentFlags().StringVar(&e.tlsCert, "tls-cert", "", "PEM file of a client certificate, for Redis servers that ask for one (default $DLOCK_TLS_CERT)")
	root.PersistentFlags().StringVar(&e.tlsKey, "tls-key", "", "PEM file of the client certificate's key (default $DLOCK_TLS_KEY)")
	root.PersistentFlags().BoolVar(&e.cluster, "cluster", false, "connect to a Redis Cluster")
	root.PersistentFlags().BoolVar(&e.redlock, "redlock", false, "the --redis URLs are independent masters: hold locks on a majority (Redlock)")
	root.PersistentFlags().StringVar(&e.prefix, "prefix", dlock.DefaultPrefix, "key prefix of the locks")
	root.PersistentFlags().BoolVarP(&e.verbose, "verbose", "v", false, "log each step to stderr: connecting, waiting for and taking the lock, the command's start and exit, the release")
	root.AddCommand(e.runCmd(), e.setCmd(), e.semCmd(), e.electCmd(), e.leaderCmd(), e.statusCmd(), e.listCmd(), e.unlockCmd())
	return root
}

// failed turns a library error into an exit: bad input is a usage error.
func failed(err error) error {
	if errors.Is(err, dlock.ErrInvalid) || errors.Is(err, dlock.ErrNoMember) || errors.Is(err, dlock.ErrUnsupported) {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	if refused(err) {
		return &ExitError{Code: ExitNoPerm, Err: fmt.Errorf("refused by Redis: %w", err)}
	}
	if unreachable(err) {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("cannot reach Redis: %w", err)}
	}
	return &ExitError{Code: 1, Err: err}
}

// refused reports whether err is Redis refusing the client's credentials
// (WRONGPASS, NOAUTH) or a command to its ACL user: NOPERM, or inside a
// script (as the library words it, see its explain) "can't run this
// command" (7.0) or "ACL failure in script" (7.2 and later).
func refused(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := reply.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "can't run this command") || strings.Contains(msg, "ACL failure in script")
}

var quietOnce sync.Once

// lockedWriter serialises the writes to w, so that lines written from
// several goroutines neither race nor interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// quiet is a go-redis logger that keeps go-redis' own lines off stderr.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// unreachable reports whether err says that Redis could not be reached or
// could not serve: a connection refused, reset or timed out, a server still
// loading its data, busy with a script that runs long, without a master
// or with no room for another client. A lock that Lock waited for in vain
// while Redis was down is reported so, not as held elsewhere.
func unreachable(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	// A connection the server closed at once (no room for another
	// client: Redis writes its error and hangs up before go-redis' first
	// command is written) shows as a bare syscall error.
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		for _, p := range []string{"LOADING", "BUSY ", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "ERR max number of clients reached"} {
			if strings.HasPrefix(reply.Error(), p) {
				return true
			}
		}
	}
	return false
}
