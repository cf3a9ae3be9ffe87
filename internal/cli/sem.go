package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/go-dlock/dlock"
)

func (e *env) semCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sem",
		Short: "Use a counting semaphore: at most N holders at once across machines",
		Long: `A semaphore lets at most --size permits be held at once, by every
process together: "sem run" holds some of them while a command runs.`,
	}
	cmd.AddCommand(e.semRunCmd())
	return parent(cmd)
}

func (e *env) semRunCmd() *cobra.Command {
	var o holdOpts
	var size, permits int64
	cmd := &cobra.Command{
		Use:   "run [flags] NAME --size N [--permits n] -- COMMAND [ARGS...]",
		Short: "Run a command while holding n of a semaphore's N permits",
		Long: `sem run takes --permits (default 1) of the --size permits of the
semaphore NAME, waiting its turn (first come, first served; a large request
holds back those behind it) while they are in use, runs COMMAND with
DLOCK_NAME, DLOCK_PERMITS and DLOCK_FENCE in its environment, and gives the
permits back when COMMAND exits. Flags and exit statuses are those of
"dlock run". Flags may come before or after NAME; "--" must come before
COMMAND.

--size is this caller's: a command is admitted while the permits in use
plus its own are at most its --size. To change the size, roll the new one
out; callers with the old and the new size can run side by side.`,
		Example: `  dlock sem run deploys --size 3 -- ./deploy.sh           # at most 3 deploys at once
  dlock sem run gpus --size 8 --permits 2 -- ./train.sh    # a job on 2 of 8 GPUs
  dlock sem run -n licences --size 5 -- ./solve.sh         # skip if all 5 are in use`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			switch {
			case !cmd.Flags().Changed("size"):
				return usage("--size is required: the most permits held at once")
			case size < 1 || size > dlock.MaxPermits:
				return usage("--size must be 1 to %d", int64(dlock.MaxPermits))
			case permits < 1 || permits > size:
				return usage("--permits must be 1 to --size (%d)", size)
			case cmd.ArgsLenAtDash() != 1 || len(args) < 2:
				return usage("usage: dlock sem run [flags] NAME --size N [--permits n] -- COMMAND [ARGS...]")
			}
			name, argv := args[0], args[1:]
			c, done, err := e.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			s := c.Semaphore(name, size, o.lockOptions()...)
			return e.hold(cmd.Context(), &o, target{
				what: fmt.Sprintf("semaphore %s (%d of %d permits)", printable(name), permits, size),
				acquire: func(ctx context.Context) (*dlock.Lease, error) {
					if o.nonblock {
						return s.TryAcquire(ctx, permits)
					}
					return s.Acquire(ctx, permits)
				},
				env: func(*dlock.Lease) []string {
					return []string{"DLOCK_NAME=" + name, "DLOCK_PERMITS=" + strconv.FormatInt(permits, 10)}
				},
			}, argv)
		},
	}
	o.register(cmd)
	// Unlike run's, these flags may follow NAME: "--" marks the command.
	cmd.Flags().SetInterspersed(true)
	cmd.Flags().Int64Var(&size, "size", 0, "the semaphore's size: the most permits held at once (required)")
	cmd.Flags().Int64Var(&permits, "permits", 1, "permits to hold while COMMAND runs")
	return cmd
}
