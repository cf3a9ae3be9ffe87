package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/go-dlock/dlock"
)

func (e *env) setCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Manage and use a pool of named locks (a mutex set)",
		Long: `A mutex set is a pool of named members (devices, licences, accounts):
"set run" holds any free member while a command runs.`,
	}
	cmd.AddCommand(e.setAddCmd(), e.setRemoveCmd(), e.setListCmd(), e.setRunCmd())
	return parent(cmd)
}

func (e *env) setAddCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "add SET MEMBER...",
		Short: "Add members to a set (idempotent; a held member stays held)",
		Args:  rangeArgs(2, 1<<30, "usage: dlock set add SET MEMBER..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withSet(cmd.Context(), args[0], func(s *dlock.MutexSet) error { return s.Add(cmd.Context(), args[1:]...) })
		},
	}
}

func (e *env) setRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove SET MEMBER...",
		Short: "Remove members from a set (a held member leaves when its holder releases it)",
		Args:  rangeArgs(2, 1<<30, "usage: dlock set remove SET MEMBER..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withSet(cmd.Context(), args[0], func(s *dlock.MutexSet) error { return s.Remove(cmd.Context(), args[1:]...) })
		},
	}
}

func (e *env) setListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list SET",
		Short: "List a set's members: held or free, holder, TTL left, fence",
		Args:  exactArgs(1, "usage: dlock set list [--json] SET"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withSet(cmd.Context(), args[0], func(s *dlock.MutexSet) error {
				ms, err := s.Members(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return writeMembersJSON(e, ms)
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "MEMBER\tSTATE\tHOLDER\tTTL\tFENCE")
				for _, m := range ms {
					state, holder, ttl, fence := "free", "-", "-", "-"
					if m.Held {
						state, holder, ttl = "held", printable(m.Metadata), formatTTL(m.TTL)
					}
					if m.Removing {
						state += " (removing)"
					}
					if m.Fence != 0 {
						fence = strconv.FormatUint(m.Fence, 10)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", printable(m.Name), state, holder, ttl, fence)
				}
				return written(tw.Flush())
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeMembersJSON(e *env, ms []dlock.MemberStatus) error {
	type member struct {
		Name      string `json:"name"`
		Held      bool   `json:"held"`
		Holder    string `json:"holder,omitempty"`
		TTLMillis *int64 `json:"ttl_ms,omitempty"`
		Fence     uint64 `json:"fence"`
		Removing  bool   `json:"removing,omitempty"`
	}
	out := make([]member, 0, len(ms))
	for _, m := range ms {
		j := member{Name: m.Name, Held: m.Held, Holder: m.Metadata, Fence: m.Fence, Removing: m.Removing}
		if m.Held {
			j.TTLMillis = millis(m.TTL)
		}
		out = append(out, j)
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func (e *env) setRunCmd() *cobra.Command {
	var o holdOpts
	cmd := &cobra.Command{
		Use:   "run [flags] SET [--] COMMAND [ARGS...]",
		Short: "Run a command while holding any free member of a set",
		Long: `set run takes the least recently used free member of SET (waiting while
all are held), runs COMMAND with DLOCK_MEMBER set to the member and
DLOCK_FENCE to the lease's fence, and releases the member when COMMAND
exits. Flags and exit statuses are those of "dlock run".`,
		Example: `  dlock set add gpus gpu-0 gpu-1 gpu-2
  dlock set run gpus -- sh -c 'train --device "$DLOCK_MEMBER"'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			name, argv, err := splitCommand(args, "dlock set run [flags] SET -- COMMAND [ARGS...]")
			if err != nil {
				return err
			}
			c, done, err := e.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			s := c.MutexSet(name, o.lockOptions()...)
			// The library waits for an Add on an empty set; from a shell
			// that is almost always a typo or a set never filled.
			if st, err := s.Status(cmd.Context()); err != nil {
				return failed(err)
			} else if st.Members == 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("set %s has no members (add some with: dlock set add %s MEMBER)", printable(name), printable(name))}
			}
			return e.hold(cmd.Context(), &o, target{
				what: "a member of set " + printable(name),
				acquire: func(ctx context.Context) (*dlock.Lease, error) {
					if o.nonblock {
						return s.TryAcquire(ctx)
					}
					return s.Acquire(ctx)
				},
				env:  func(l *dlock.Lease) []string { return []string{"DLOCK_SET=" + name, "DLOCK_MEMBER=" + l.Name()} },
				held: func(l *dlock.Lease) string { return "member " + printable(l.Name()) + " of set " + printable(name) },
			}, argv)
		},
	}
	o.register(cmd)
	return cmd
}

func (e *env) withSet(ctx context.Context, name string, fn func(*dlock.MutexSet) error) error {
	c, done, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := fn(c.MutexSet(name)); err != nil {
		return failed(err)
	}
	return nil
}
