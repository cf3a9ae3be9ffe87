package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (e *env) unlockCmd() *cobra.Command {
	var force bool
	var member string
	cmd := &cobra.Command{
		Use:   "unlock --force NAME",
		Short: "Remove a lock's holders (for operators)",
		Long: `unlock --force removes whoever holds the lock NAME (every kind: mutex,
fair, rw readers and writer) and wakes its waiters. With --member, it frees
one member of the mutex set NAME instead. The holders learn at their next
renewal that their lease is lost. It says what it removed.`,
		Args: exactArgs(1, "usage: dlock unlock --force [--member MEMBER] NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return usage("unlock removes other processes' locks; say --force if you mean it")
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
				fmt.Fprintf(e.stdout, "%s is not held; nothing removed\n", printable(name))
			}
			for _, st := range freed {
				switch {
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
