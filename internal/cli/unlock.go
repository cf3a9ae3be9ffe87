package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/go-dlock/dlock"
)

func (e *env) unlockCmd() *cobra.Command {
	var force bool
	var member string
	cmd := &cobra.Command{
		Use:   "unlock --force NAME",
		Short: "Remove a lock's holders (for operators)",
		Long: `unlock --force removes whoever holds the lock NAME (every kind: mutex,
fair, rw readers and writer, semaphore, election) and wakes its waiters.
With --member, it frees one member of the mutex set NAME instead (a set
is freed a member at a time). The holders learn at their next
renewal that their lease is lost. It says what it removed.`,
		Args: exactArgs(1, "usage: dlock unlock --force [--member MEMBER] NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return usage("unlock removes other processes' locks; say --force if you mean it")
			}
			if cmd.Flags().Changed("member") && member == "" {
				// Unset in a script: not the whole lock of every kind.
				return usage("--member needs a member name")
			}
			c, done, err := e.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			name := args[0]
			if member != "" {
				ms, err := c.MutexSet(name).ForceRelease(cmd.Context(), member)
				if err != nil {
					return failed(err)
				}
				if !ms.Held {
					fmt.Fprintf(e.stdout, "%s in set %s was free; nothing removed\n", printable(member), printable(name))
					return nil
				}
				fmt.Fprintf(e.stdout, "freed %s in set %s, held by %s (fence %d)\n",
					printable(member), printable(name), printable(ms.Metadata), ms.Fence)
				return nil
			}
			freed, err := c.ForceUnlock(cmd.Context(), name)
			if err != nil {
				return failed(err)
			}
			if len(freed) == 0 {
				if held := heldMembers(cmd.Context(), c, name); held > 0 {
					return usage("%s is a mutex set with %d members held: free one with --member MEMBER", printable(name), held)
				}
				fmt.Fprintf(e.stdout, "%s is not held; nothing removed\n", printable(name))
			}
			for _, st := range freed {
				switch {
				case len(st.Holders) > 0:
					var permits int64
					for _, h := range st.Holders {
						permits += h.Permits
					}
					fmt.Fprintf(e.stdout, "removed %d holders of %s %s (%d permits)\n", len(st.Holders), st.Kind, printable(name), permits)
				case len(st.Readers) > 0 && st.Metadata == "":
					fmt.Fprintf(e.stdout, "removed %d readers of %s %s\n", len(st.Readers), st.Kind, printable(name))
				default:
					fmt.Fprintf(e.stdout, "removed %s %s held by %s (fence %d)\n", st.Kind, printable(name), printable(st.Metadata), st.Fence)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "really remove other processes' locks")
	cmd.Flags().StringVar(&member, "member", "", "free this member of the mutex set NAME")
	return cmd
}

// heldMembers is how many members of the mutex set name are held (0 when
// there is no such set, or it cannot be read).
func heldMembers(ctx context.Context, c *dlock.Client, name string) int {
	sts, err := c.Inspect(ctx, name)
	if err != nil {
		return 0
	}
	for _, st := range sts {
		if st.Kind == "set" {
			return st.Members - st.Free
		}
	}
	return 0
}
