package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-dlock/dlock"
)

// ExitNoLeader is dlock leader's exit status when nobody leads.
const ExitNoLeader = 1

// electCmd is dlock elect: run a command while leading an election.
func (e *env) electCmd() *cobra.Command {
	var o holdOpts
	var value string
	cmd := &cobra.Command{
		Use:   "elect [flags] NAME [--value VALUE] -- COMMAND [ARGS...]",
		Short: "Run a command while leader of an election, announcing a value",
		Long: `elect campaigns in the election NAME, waiting its turn (first come, first
served) while someone else leads, runs COMMAND once it leads, and resigns
when COMMAND exits: the first campaigner waiting leads at once. While it
leads, "dlock leader NAME" shows its --value (default host:pid, like
--metadata) to everyone. COMMAND sees DLOCK_NAME, DLOCK_TERM (the term: it
rises with every new leader) and DLOCK_FENCE (the same number) in its
environment.

-n leads only if nobody leads or waits to. Flags and exit statuses are
those of "dlock run": the --conflict-exit-code (default 1) if leadership is
not obtained; if it is lost while COMMAND runs (Redis unreachable or the
election's keys removed), COMMAND gets SIGTERM, then SIGKILL after
--kill-after, and elect exits 75. Flags may come before or after NAME; "--"
must come before COMMAND.`,
		Example: `  dlock elect scheduler --value 10.0.0.7:9000 -- ./scheduler    # one scheduler; standbys wait
  dlock elect -n cron:compact -- ./compact.sh                      # skip if another host leads
  dlock elect -w 1m primary -- sh -c 'serve --term "$DLOCK_TERM"'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return usage("usage: dlock elect [flags] NAME [--value VALUE] -- COMMAND [ARGS...]")
			}
			return e.elect(cmd.Context(), &o, args[0], value, args[1:])
		},
	}
	o.register(cmd)
	// As with sem run, flags may follow NAME: "--" marks the command.
	cmd.Flags().SetInterspersed(true)
	cmd.Flags().StringVar(&value, "value", defaultMetadata(), "the value announced while leading, shown by dlock leader")
	return cmd
}

// elect runs argv while leading the election name, announcing value.
func (e *env) elect(ctx context.Context, o *holdOpts, name, value string, argv []string) error {
	c, done, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	el := c.Election(name, o.lockOptions()...)
	campaign := el.Campaign
	if o.nonblock {
		campaign = el.TryCampaign
	}
	return e.hold(ctx, o, target{
		what: "election " + printable(name),
		acquire: func(ctx context.Context) (*dlock.Lease, error) {
			l, err := campaign(ctx, value)
			if err != nil {
				return nil, err
			}
			return l.Lease, nil
		},
		env: func(l *dlock.Lease) []string {
			return []string{"DLOCK_NAME=" + name, "DLOCK_TERM=" + strconv.FormatUint(l.Fence(), 10)}
		},
		held: func(l *dlock.Lease) string { return fmt.Sprintf("election %s (term %d)", printable(name), l.Fence()) },
	}, argv)
}

// leaderCmd is dlock leader: show or follow who leads an election.
func (e *env) leaderCmd() *cobra.Command {
	var watch, asJSON bool
	cmd := &cobra.Command{
		Use:   "leader [--watch] [--json] NAME",
		Short: "Show who leads an election, or follow every change",
		Long: `leader prints who leads the election NAME: its value, its term and when
the term began (by Redis' clock), as in

  10.0.0.7:9000  term 12  since 2026-11-24T17:18:33Z

When nobody leads, it says "nobody leads election NAME" on stderr and
exits 1. --json prints one JSON object on a line instead:
{"name":...,"value":...,"term":...,"since":...}; when nobody leads,
"value" is "", "term" 0, "since" is left out, and the exit status is 1.

--watch prints the leader, or "nobody leads election NAME", then a line
for every change (a new term, a new value, nobody), and exits 0 on SIGINT
or SIGTERM. It is woken by Redis rather than polling; while Redis cannot
be reached it keeps trying, and prints the leader once Redis answers
again. With -v, it also logs on stderr each leader Redis reports, even
one that changes nothing printed, and the library's retries.

Redis unreachable at the start exits 69; usage errors exit 2.`,
		Example: `  dlock leader scheduler
  dlock leader --json scheduler | jq -r .value
  dlock leader --watch --json scheduler     # one JSON line per change`,
		Args: exactArgs(1, "usage: dlock leader [--watch] [--json] NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, done, err := e.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			el := c.Election(args[0])
			ld, err := el.Leader(cmd.Context())
			if err != nil && !errors.Is(err, dlock.ErrNoLeader) {
				return failed(err)
			}
			if watch {
				return e.watchLeader(cmd.Context(), el, args[0], ld, asJSON)
			}
			return e.showLeader(args[0], ld, asJSON)
		},
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "print the leader, then every change, until interrupted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object per line")
	return cmd
}

// showLeader prints ld once; nobody leading is exit ExitNoLeader.
func (e *env) showLeader(name string, ld dlock.Leader, asJSON bool) error {
	if ld.Term != 0 || asJSON {
		if err := e.printLeader(name, ld, asJSON); err != nil {
			return err
		}
	}
	if ld.Term == 0 {
		return &ExitError{Code: ExitNoLeader, Err: errors.New(nobody(name))}
	}
	return nil
}

// watchLeader prints ld, then every change Observe reports, until ctx
// ends or a SIGINT or SIGTERM comes.
func (e *env) watchLeader(ctx context.Context, el *dlock.Election, name string, ld dlock.Leader, asJSON bool) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	f := &follower{e: e, el: el, name: name, asJSON: asJSON, shown: ld}
	if err := e.printLeader(name, ld, asJSON); err != nil {
		return err
	}
	if err := f.follow(ctx, el.Observe(ctx)); err != nil {
		return err
	}
	if ctx.Err() != nil {
		e.verbosef("stopped following election %s", printable(name))
		return nil
	}
	return &ExitError{Code: 1, Err: fmt.Errorf("stopped following election %s", printable(name))}
}

// follower prints the leader of an election as it changes.
type follower struct {
	e      *env
	el     *dlock.Election
	name   string
	asJSON bool
	shown  dlock.Leader // the leader printed last; zero: nobody
	ended  uint64       // the highest term known to have ended
}

// follow prints what obs reports until it closes. Observe reports
// nothing when nobody leads as it starts: had the leader shown resigned
// just before, nothing would say so. So, until obs reports its first
// leader, follow reads the leader again now and then (backing off to
// once a second), and shows nobody if a read finds nobody.
func (f *follower) follow(ctx context.Context, obs <-chan dlock.Leader) error {
	recheck, delay := f.shown.Term != 0, 100*time.Millisecond
	for {
		var timer <-chan time.Time
		if recheck {
			timer = time.After(delay)
		}
		select {
		case ld, ok := <-obs:
			if !ok {
				return nil
			}
			recheck = false
			f.e.verbosef("election %s: observed %s", printable(f.name), leading(ld))
			if err := f.show(ld); err != nil {
				return err
			}
		case <-timer:
			delay = min(2*delay, time.Second)
			if _, err := f.el.Leader(ctx); errors.Is(err, dlock.ErrNoLeader) {
				f.e.verbosef("election %s: read again: %s", printable(f.name), leading(dlock.Leader{}))
				recheck = false
				if err := f.show(dlock.Leader{}); err != nil {
					return err
				}
			}
		}
	}
}

// show prints ld unless it is what was printed last or a term known to
// have ended.
func (f *follower) show(ld dlock.Leader) error {
	if sameLeader(ld, f.shown) || (ld.Term != 0 && ld.Term <= f.ended) {
		return nil
	}
	if ld.Term == 0 {
		f.ended = max(f.ended, f.shown.Term)
	}
	f.shown = ld
	return f.e.printLeader(f.name, ld, f.asJSON)
}

// leading says who leads, for -v lines: "v1 leads, term 7", "nobody leads".
func leading(ld dlock.Leader) string {
	if ld.Term == 0 {
		return "nobody leads"
	}
	return fmt.Sprintf("%s leads, term %d", printable(ld.Value), ld.Term)
}

// sameLeader reports whether a and b are the same leader, value and term.
func sameLeader(a, b dlock.Leader) bool {
	return a.Value == b.Value && a.Term == b.Term && a.Since.Equal(b.Since)
}

// jsonLeader is the --json form of a leader; term 0 is nobody.
type jsonLeader struct {
	Name  string     `json:"name"`
	Value string     `json:"value"`
	Term  uint64     `json:"term"`
	Since *time.Time `json:"since,omitempty"`
}

// printLeader writes one line about ld to stdout, in one write, and
// flushes stdout if it buffers.
func (e *env) printLeader(name string, ld dlock.Leader, asJSON bool) error {
	var line []byte
	switch {
	case asJSON:
		j := jsonLeader{Name: name, Value: ld.Value, Term: ld.Term}
		if ld.Term != 0 {
			j.Since = &ld.Since
		}
		b, err := json.Marshal(j)
		if err != nil {
			return err
		}
		line = append(b, '\n')
	case ld.Term == 0:
		line = []byte(nobody(name) + "\n")
	default:
		line = fmt.Appendf(nil, "%s  term %d  since %s\n", printable(ld.Value), ld.Term, ld.Since.Format(time.RFC3339))
	}
	if _, err := e.stdout.Write(line); err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("writing the leader: %w", err)}
	}
	if f, ok := e.stdout.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// nobody is the line that says nobody leads the election name.
func nobody(name string) string {
	return "nobody leads election " + printable(name)
}
