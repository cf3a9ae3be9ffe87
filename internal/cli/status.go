package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-dlock/dlock"
)

func (e *env) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show who holds a lock, for how long, and who waits",
		Long: `status shows every kind of lock called NAME that Redis has state for
(mutex, fair, rw, set, semaphore, election): the holder's metadata, the
time left on its lease, its fencing token (an election's term), and the
waiters, readers, members, permits in use or leader's value. A name with
no state is free.`,
		Args: exactArgs(1, "usage: dlock status [--json] NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, done, err := e.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			sts, err := e.inspect(cmd.Context(), c, args[0])
			if err != nil {
				return failed(err)
			}
			if asJSON {
				return writeJSON(e.stdout, sts)
			}
			if len(sts) == 0 {
				_, err := fmt.Fprintf(e.stdout, "%s: free (no state in Redis)\n", printable(args[0]))
				return written(err)
			}
			return writeTable(e.stdout, sts)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// inspect is Client.Inspect; over Redlock, which keeps mutexes only, the
// status of the mutex called name, if the masters remember it.
func (e *env) inspect(ctx context.Context, c *dlock.Client, name string) ([]dlock.Status, error) {
	if !e.redlock {
		return c.Inspect(ctx, name)
	}
	st, err := c.Mutex(name).Status(ctx)
	if err != nil || (!st.Held && st.Fence == 0) {
		return nil, err
	}
	return []dlock.Status{st}, nil
}

func (e *env) listCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [PATTERN]",
		Short: "List the locks in Redis, optionally those whose name matches PATTERN",
		Long: `list walks Redis with SCAN (never KEYS) and shows every lock under the
prefix whose name matches PATTERN (Go's path.Match syntax: *, ?, [...]; as in
a file path, * and ? do not match a /: "deploy/*" lists deploy/prod).`,
		Args: rangeArgs(0, 1, "usage: dlock list [--json] [PATTERN]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pattern := ""
			if len(args) == 1 {
				pattern = args[0]
			}
			c, done, err := e.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			sts, err := c.List(cmd.Context(), pattern)
			if err != nil {
				return failed(err)
			}
			if asJSON {
				return writeJSON(e.stdout, sts)
			}
			return writeTable(e.stdout, sts)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// jsonStatus is the --json form of a lock's status.
type jsonStatus struct {
	Name          string       `json:"name"`
	Kind          string       `json:"kind"`
	Held          bool         `json:"held"`
	Holder        string       `json:"holder,omitempty"`
	TTLMillis     *int64       `json:"ttl_ms,omitempty"` // -1: never expires
	Since         *time.Time   `json:"since,omitempty"`
	Fence         uint64       `json:"fence"`
	Waiters       []jsonHolder `json:"waiters,omitempty"`
	Readers       []jsonHolder `json:"readers,omitempty"`
	WriterWaiting bool         `json:"writer_waiting,omitempty"`
	Members       *int         `json:"members,omitempty"`
	Free          *int         `json:"free,omitempty"`
	Size          *int64       `json:"size,omitempty"`   // a semaphore's, as its latest acquisition asked
	InUse         *int64       `json:"in_use,omitempty"` // a semaphore's permits held
	Holders       []jsonHolder `json:"holders,omitempty"`
	Value         *string      `json:"value,omitempty"` // an election's leader's; "" while nobody leads
}

type jsonHolder struct {
	Metadata  string    `json:"metadata"`
	Since     time.Time `json:"since"`
	TTLMillis *int64    `json:"ttl_ms,omitempty"`
	Fence     uint64    `json:"fence,omitempty"`
	Member    string    `json:"member,omitempty"`  // what a MutexSet waiter waits for
	Permits   int64     `json:"permits,omitempty"` // a semaphore's holder holds, its waiter waits for
}

func toJSON(st dlock.Status) jsonStatus {
	j := jsonStatus{Name: st.Name, Kind: st.Kind, Held: st.Held, Holder: st.Metadata, Fence: st.Fence, WriterWaiting: st.WriterWaiting}
	if st.TTL != 0 {
		j.TTLMillis = millis(st.TTL)
	}
	if !st.Since.IsZero() {
		j.Since = &st.Since
	}
	sem := st.Kind == "semaphore"
	for _, w := range st.Waiters {
		h := jsonHolder{Metadata: w.Metadata, Since: w.Since, Member: w.Member}
		if sem {
			h.Permits = w.Permits
		}
		j.Waiters = append(j.Waiters, h)
	}
	for _, h := range st.Holders {
		j.Holders = append(j.Holders, jsonHolder{Metadata: h.Metadata, Since: h.Since, TTLMillis: millis(h.TTL), Fence: h.Fence, Permits: h.Permits})
	}
	if sem {
		j.Size, j.InUse = &st.Size, &st.InUse
	}
	for _, r := range st.Readers {
		j.Readers = append(j.Readers, jsonHolder{Metadata: r.Metadata, Since: r.Since, TTLMillis: millis(r.TTL), Fence: r.Fence})
	}
	if st.Kind == "set" {
		j.Members, j.Free = &st.Members, &st.Free
	}
	if st.Kind == "election" {
		j.Value = &st.Value
	}
	return j
}

func millis(d time.Duration) *int64 {
	ms := d.Milliseconds()
	if d < 0 {
		ms = -1
	}
	return &ms
}

func writeJSON(w io.Writer, sts []dlock.Status) error {
	out := make([]jsonStatus, 0, len(sts))
	for _, st := range sts {
		out = append(out, toJSON(st))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return written(enc.Encode(out))
}

// written is err, from writing the output, as the exit it makes: 1, not
// a usage error.
func written(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: 1, Err: fmt.Errorf("writing the output: %w", err)}
}

// writeTable prints statuses as an aligned table.
func writeTable(w io.Writer, sts []dlock.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSTATE\tHOLDER\tTTL\tFENCE\tWAITING")
	for _, st := range sts {
		state := "free"
		if st.Held {
			state = "held"
		}
		holder, ttl := "-", "-"
		switch {
		case st.Held && st.Metadata != "":
			holder = printable(st.Metadata)
		case len(st.Holders) == 1:
			holder = printable(st.Holders[0].Metadata)
		case len(st.Holders) > 1:
			holder = fmt.Sprintf("%d holders", len(st.Holders))
		}
		if st.Held && st.TTL != 0 {
			ttl = formatTTL(st.TTL)
		}
		fence := "-"
		if st.Fence != 0 {
			fence = strconv.FormatUint(st.Fence, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(st.Name), st.Kind, state, holder, ttl, fence, waiting(st))
	}
	return written(tw.Flush())
}

// waiting summarises who else is in the lock: queued waiters, readers,
// queued writers and whether they hold new readers back, free members,
// permits in use, an election's leader.
func waiting(st dlock.Status) string {
	var parts []string
	switch st.Kind {
	case "mutex", "fair":
		parts = append(parts, fmt.Sprintf("%d queued", len(st.Waiters)))
	case "rw":
		parts = append(parts, fmt.Sprintf("%d readers", len(st.Readers)))
		if len(st.Waiters) > 0 {
			parts = append(parts, fmt.Sprintf("%d writers queued", len(st.Waiters)))
		}
		if st.WriterWaiting {
			parts = append(parts, "new readers wait")
		}
	case "set":
		parts = append(parts, fmt.Sprintf("%d/%d free", st.Free, st.Members))
		if len(st.Waiters) > 0 {
			parts = append(parts, fmt.Sprintf("%d queued", len(st.Waiters)))
		}
	case "semaphore":
		parts = append(parts, fmt.Sprintf("%d/%d permits in use", st.InUse, st.Size))
		if len(st.Waiters) > 0 {
			parts = append(parts, fmt.Sprintf("%d queued", len(st.Waiters)))
		}
	case "election":
		parts = append(parts, "no leader")
		if st.Held {
			parts[0] = "leader " + printable(st.Value) // FENCE is the term
		}
		if len(st.Waiters) > 0 {
			parts = append(parts, fmt.Sprintf("%d queued", len(st.Waiters)))
		}
	default:
		return "-"
	}
	return strings.Join(parts, ", ")
}

func formatTTL(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// printable quotes names that would garble a table (spaces, control
// bytes, invalid UTF-8).
func printable(s string) string {
	if s == "" {
		return `""`
	}
	q := strconv.Quote(s)
	if q[1:len(q)-1] == s && !strings.ContainsAny(s, " \t") {
		return s
	}
	return q
}

func exactArgs(n int, msg string) cobra.PositionalArgs {
	return rangeArgs(n, n, msg)
}

func rangeArgs(lo, hi int, msg string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usage("%s", msg)
		}
		return nil
	}
}
