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
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/go-dlock/dlock"
)

// Exit codes besides a command's own.
const (
	ExitConflict = 1  // the lock was not obtained (default of -E)
	ExitUsage    = 2  // bad arguments, flags or Redis URL
	ExitLost     = 75 // the lease was lost while the command ran (EX_TEMPFAIL)
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

// env is what every command shares: the streams and the connection flags.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	redisURL       string
	cluster        bool
	redlock        bool
	prefix         string
}

// Run runs the dlock command line args (without the program name). Errors
// are printed to stderr, prefixed "dlock: ", and returned.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
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
		fmt.Fprintln(stderr, "dlock:", ee.Err)
	}
	return err
}

func (e *env) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "dlock",
		Short: "Distributed locks on Redis for shell scripts: flock(1) for many machines",
		Long: `dlock runs commands while holding distributed locks on Redis, so that
processes on many machines never run the same critical section at once.

The Redis server is given by --redis or $DLOCK_REDIS (default ` + DefaultRedis + `):
redis:// or rediss:// (TLS) URLs, with user:password@ for ACLs. Several
comma-separated URLs, or --cluster, mean a Redis Cluster. With --redlock,
the URLs are independent masters (3 or 5) and a lock is held on a majority
of them (Redlock: plain mutexes only).`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	def := os.Getenv("DLOCK_REDIS")
	if def == "" {
		def = DefaultRedis
	}
	root.PersistentFlags().StringVar(&e.redisURL, "redis", def, "Redis URL(s), comma-separated for a cluster ($DLOCK_REDIS)")
	root.PersistentFlags().BoolVar(&e.cluster, "cluster", false, "connect to a Redis Cluster")
	root.PersistentFlags().BoolVar(&e.redlock, "redlock", false, "the --redis URLs are independent masters: hold locks on a majority (Redlock)")
	root.PersistentFlags().StringVar(&e.prefix, "prefix", dlock.DefaultPrefix, "key prefix of the locks")
	root.AddCommand(e.runCmd(), e.setCmd(), e.statusCmd(), e.listCmd(), e.unlockCmd())
	return root
}

// connect opens the Redis client and a dlock client on it; close both
// with the returned function.
func (e *env) connect() (*dlock.Client, func(), error) {
	if e.redlock {
		return e.connectRedlock()
	}
	rdb, err := e.redisClient()
	if err != nil {
		return nil, nil, err
	}
	c := dlock.New(rdb, dlock.WithPrefix(e.prefix))
	return c, func() { c.Close(); rdb.Close() }, nil
}

// connectRedlock opens one client per --redis URL and a Redlock client on
// them.
func (e *env) connectRedlock() (*dlock.Client, func(), error) {
	if e.cluster {
		return nil, nil, usage("--redlock and --cluster exclude each other")
	}
	opts, err := e.redisOptions()
	if err != nil {
		return nil, nil, err
	}
	rdbs := make([]redis.UniversalClient, len(opts))
	for i, o := range opts {
		rdbs[i] = redis.NewClient(o)
	}
	c := dlock.NewRedlock(rdbs, dlock.WithPrefix(e.prefix))
	return c, func() {
		c.Close()
		for _, r := range rdbs {
			r.Close()
		}
	}, nil
}

// redisOptions parses the --redis URLs with go-redis' own parser.
func (e *env) redisOptions() ([]*redis.Options, error) {
	var opts []*redis.Options
	for _, u := range strings.Split(e.redisURL, ",") {
		o, err := redis.ParseURL(strings.TrimSpace(u))
		if err != nil {
			return nil, usage("bad --redis URL %q: %v", u, err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// redisClient connects to the --redis URLs: one server, or a cluster.
func (e *env) redisClient() (redis.UniversalClient, error) {
	opts, err := e.redisOptions()
	if err != nil {
		return nil, err
	}
	first := opts[0]
	if len(opts) == 1 && !e.cluster {
		return redis.NewClient(first), nil
	}
	var addrs []string
	for _, o := range opts {
		addrs = append(addrs, o.Addr)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:     addrs,
		Username:  first.Username,
		Password:  first.Password,
		TLSConfig: first.TLSConfig,
	}), nil
}

// failed turns a library error into an exit: bad input is a usage error.
func failed(err error) error {
	if errors.Is(err, dlock.ErrInvalid) || errors.Is(err, dlock.ErrNoMember) || errors.Is(err, dlock.ErrUnsupported) {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return &ExitError{Code: 1, Err: err}
}
