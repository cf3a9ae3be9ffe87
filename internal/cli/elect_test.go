package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/cli"
	"github.com/go-dlock/dlock/internal/redistest"
)

// leaderLine is dlock leader's --json line.
type leaderLine struct {
	Name  string     `json:"name"`
	Value string     `json:"value"`
	Term  uint64     `json:"term"`
	Since *time.Time `json:"since"`
}

func parseLeader(t *testing.T, line string) leaderLine {
	t.Helper()
	var ld leaderLine
	if err := json.Unmarshal([]byte(line), &ld); err != nil {
		t.Fatalf("leader --json printed %q: %v", line, err)
	}
	return ld
}

// campaign makes the library's client lead election name with value.
func campaign(t *testing.T, c *dlock.Client, name, value string) *dlock.Leadership {
	t.Helper()
	l, err := c.Election(name, dlock.WithTTL(30*time.Second), dlock.WithMetadata("lib-host")).Campaign(t.Context(), value)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestElectRunsCommandAsLeader: the command runs as leader, sees the
// term, exits with its own status, and the leadership ends with it.
func TestElectRunsCommandAsLeader(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var out, errb bytes.Buffer
	cmd := spawn(t, srv, "elect", "--value", "v1", "lead", "--", "sh", "-c",
		`"$0" leader lead && echo "$DLOCK_NAME $DLOCK_TERM $DLOCK_FENCE"; exit 3`, binary)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if code := exitOf(cmd.Run()); code != 3 {
		t.Fatalf("elect: exit %d, want the command's 3; stderr %q", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("elect printed %q; want the leader line and the environment", out.String())
	}
	env := strings.Fields(lines[1])
	term, err := strconv.ParseUint(env[len(env)-1], 10, 64)
	if len(env) != 3 || env[0] != "lead" || env[1] != env[2] || err != nil || term == 0 {
		t.Fatalf("DLOCK_NAME DLOCK_TERM DLOCK_FENCE = %q; want lead and the term twice", lines[1])
	}
	if want := "v1  term " + env[1] + "  since "; !strings.HasPrefix(lines[0], want) {
		t.Errorf("dlock leader while leading printed %q; want %q...", lines[0], want)
	}

	c := dlock.New(srv.Client(t))
	defer c.Close()
	if ld, err := c.Election("lead").Leader(t.Context()); !errors.Is(err, dlock.ErrNoLeader) {
		t.Errorf("after elect: Leader = %+v, %v; want ErrNoLeader", ld, err)
	}
	if code, stdout, errOut := dl(t, srv, "leader", "lead"); code != cli.ExitNoLeader || stdout != "" || errOut != "dlock: nobody leads election lead\n" {
		t.Errorf("leader with nobody: exit %d, stdout %q, stderr %q", code, stdout, errOut)
	}
	code, stdout, _ := dl(t, srv, "leader", "--json", "lead")
	if ld := parseLeader(t, stdout); code != cli.ExitNoLeader || ld != (leaderLine{Name: "lead"}) {
		t.Errorf("leader --json with nobody: exit %d, %+v", code, ld)
	}

	// Flags after NAME; -n leads when nobody does; a new term is higher.
	code, stdout, errOut := dl(t, srv, "elect", "lead", "-n", "--value", "v2", "--", "sh", "-c", `echo "$DLOCK_TERM"`)
	if next, err := strconv.ParseUint(strings.TrimSpace(stdout), 10, 64); code != 0 || err != nil || next <= term {
		t.Errorf("second elect: exit %d, term %q after %d (%v), stderr %q", code, stdout, term, err, errOut)
	}
}

// TestElectWhileLed: elect -n and -w give up while the library leads;
// leader and status show the library's leadership.
func TestElectWhileLed(t *testing.T) {
	t.Parallel()
	srv, c := library(t)
	l := campaign(t, c, "busy", "lib")
	if code, _, errOut := dl(t, srv, "elect", "-n", "busy", "--", "true"); code != cli.ExitConflict || !strings.Contains(errOut, "not obtained") {
		t.Errorf("elect -n while led: exit %d, stderr %q; want 1 and a message", code, errOut)
	}
	if code, _, _ := dl(t, srv, "elect", "busy", "-n", "-E", "7", "--", "true"); code != 7 {
		t.Errorf("elect -n -E 7 while led: exit %d, want 7", code)
	}
	start := time.Now()
	if code, _, _ := dl(t, srv, "elect", "-w", "200ms", "busy", "--", "true"); code != cli.ExitConflict {
		t.Errorf("elect -w 200ms while led: exit %d, want 1", code)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("-w 200ms gave up after %v", d)
	}

	term := strconv.FormatUint(l.Fence(), 10)
	code, out, _ := dl(t, srv, "leader", "busy")
	f := strings.Fields(out)
	if code != 0 || len(f) != 5 || f[0] != "lib" || f[1] != "term" || f[2] != term || f[3] != "since" {
		t.Errorf("leader: exit %d, %q; want lib  term %s  since TIME", code, out, term)
	} else if since, err := time.Parse(time.RFC3339, f[4]); err != nil || time.Since(since).Abs() > time.Minute {
		t.Errorf("leader since %q: %v", f[4], err)
	}
	code, out, _ = dl(t, srv, "leader", "--json", "busy")
	if ld := parseLeader(t, out); code != 0 || ld.Name != "busy" || ld.Value != "lib" || ld.Term != l.Fence() ||
		ld.Since == nil || time.Since(*ld.Since).Abs() > time.Minute || strings.Count(out, "\n") != 1 {
		t.Errorf("leader --json: exit %d, %q", code, out)
	}

	if code, out, _ := dl(t, srv, "status", "busy"); code != 0 || !strings.Contains(out, "election") ||
		!strings.Contains(out, "lib-host") || !strings.Contains(out, "leader lib") || !strings.Contains(out, term) {
		t.Errorf("status table while led:\n%s", out)
	}
	code, out, _ = dl(t, srv, "list", "--json", "bus*")
	var sts []map[string]any
	if err := json.Unmarshal([]byte(out), &sts); err != nil || code != 0 || len(sts) != 1 || sts[0]["kind"] != "election" ||
		sts[0]["value"] != "lib" || sts[0]["holder"] != "lib-host" || sts[0]["fence"] != float64(l.Fence()) {
		t.Errorf("list --json while led: %s", out)
	}
	if err := l.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := dl(t, srv, "status", "busy"); code != 0 || !strings.Contains(out, "no leader") {
		t.Errorf("status table after resigning:\n%s", out)
	}
}

func TestElectUsageErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, args := range [][]string{
		{"elect"},
		{"elect", "name-only"},
		{"elect", "name", "true"},
		{"elect", "--", "true"},
		{"elect", "name", "--"},
		{"elect", "name", "extra", "--", "true"},
		{"elect", "-n", "-w", "1s", "x", "--", "true"},
		{"elect", "--ttl", "0s", "x", "--", "true"},
		{"elect", "--bogus", "x", "--", "true"},
		{"elect", "", "--", "true"},
		{"leader"},
		{"leader", "a", "b"},
		{"leader", "--bogus", "a"},
		{"leader", ""},
	} {
		if code, _, errOut := dl(t, srv, args...); code != cli.ExitUsage || !strings.HasPrefix(errOut, "dlock: ") ||
			strings.Contains(errOut, "dlock: dlock:") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
}

// TestElectHelp: as TestHelpNamesEveryFlagsType, for elect and leader.
func TestElectHelp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, sub := range []string{"elect", "leader"} {
		code, out, _ := dl(t, srv, sub, "--help")
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Fatalf("%s --help: exit %d:\n%s", sub, code, out)
		}
		for _, want := range map[string][]string{"elect": {"--metadata string", "--value string", "DLOCK_TERM"}, "leader": {"--watch", "--json"}}[sub] {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help does not show %s:\n%s", sub, want, out)
			}
		}
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[0], "--") && f[1] == "dlock" {
				t.Errorf("%s --help: %q takes a quoted word for its value", sub, line)
			}
		}
	}
}

func TestElectLeaderUnreachable(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"leader", "x"}, {"leader", "--watch", "x"}, {"elect", "x", "--", "true"}} {
		var out, errb bytes.Buffer
		err := cli.Run(context.Background(), append([]string{"--redis", "redis://127.0.0.1:1"}, args...), strings.NewReader(""), &out, &errb)
		if code := cli.ExitCode(err); code != cli.ExitUnavailable || !strings.Contains(errb.String(), "cannot reach Redis") {
			t.Errorf("%q with Redis down: exit %d, stderr %q; want %d", args, code, errb.String(), cli.ExitUnavailable)
		}
	}
}

// watcher is a spawned dlock leader --watch and the lines it prints.
type watcher struct {
	t      *testing.T
	lines  chan string
	stderr bytes.Buffer // read it once wait has returned
	wait   func() int
	kill   func(syscall.Signal)
}

func watch(t *testing.T, srv *redistest.Server, args ...string) *watcher {
	t.Helper()
	cmd := spawn(t, srv, append([]string{"leader", "--watch"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{t: t, lines: make(chan string, 16)}
	cmd.Stderr = &w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		close(w.lines)
	}()
	w.wait = func() int {
		for range w.lines {
		}
		return exitOf(cmd.Wait())
	}
	w.kill = func(sig syscall.Signal) { cmd.Process.Signal(sig) }
	return w
}

// next returns the next line the watcher prints, within 10 seconds.
func (w *watcher) next() string {
	w.t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			w.t.Fatal("leader --watch exited early")
		}
		return line
	case <-time.After(10 * time.Second):
		w.t.Fatal("leader --watch printed nothing for 10s")
	}
	return ""
}

// TestLeaderWatch: --watch prints nobody, then a new leader, a new value,
// nobody again, and exits 0 on SIGINT; in text, the current leader first
// and exit 0 on SIGTERM.
func TestLeaderWatch(t *testing.T) {
	t.Parallel()
	srv, c := library(t)
	w := watch(t, srv, "--json", "w")
	if ld := parseLeader(t, w.next()); ld != (leaderLine{Name: "w"}) {
		t.Errorf("first line with nobody leading: %+v", ld)
	}
	l := campaign(t, c, "w", "a")
	if ld := parseLeader(t, w.next()); ld.Name != "w" || ld.Value != "a" || ld.Term != l.Fence() || ld.Since == nil {
		t.Errorf("after Campaign: %+v; want a, term %d", ld, l.Fence())
	}
	if err := l.Proclaim(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	if ld := parseLeader(t, w.next()); ld.Value != "b" || ld.Term != l.Fence() {
		t.Errorf("after Proclaim: %+v; want b, term %d", ld, l.Fence())
	}
	if err := l.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ld := parseLeader(t, w.next()); ld != (leaderLine{Name: "w"}) {
		t.Errorf("after Resign: %+v; want nobody", ld)
	}
	w.kill(syscall.SIGINT)
	if code := w.wait(); code != 0 {
		t.Errorf("leader --watch after SIGINT: exit %d, want 0", code)
	}

	l = campaign(t, c, "w", "c d")
	w = watch(t, srv, "w")
	if line, want := w.next(), `"c d"  term `+strconv.FormatUint(l.Fence(), 10)+"  since "; !strings.HasPrefix(line, want) {
		t.Errorf("first line while led: %q; want %q...", line, want)
	}
	if err := l.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if line := w.next(); line != "nobody leads election w" {
		t.Errorf("after Resign: %q", line)
	}
	w.kill(syscall.SIGTERM)
	if code := w.wait(); code != 0 {
		t.Errorf("leader --watch after SIGTERM: exit %d, want 0", code)
	}
}

// TestElectLostLeadership: unlock --force ends the leadership while the
// command runs; elect stops it and exits 75.
func TestElectLostLeadership(t *testing.T) {
	t.Parallel()
	srv, c := library(t)
	cmd := spawn(t, srv, "elect", "--ttl", "1s", "--kill-after", "500ms", "doomed", "--", "sleep", "30")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Election("doomed").Leader(t.Context()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("elect never led")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out, _ := dl(t, srv, "unlock", "--force", "doomed"); code != 0 || !strings.Contains(out, "removed election doomed") {
		t.Errorf("unlock --force: exit %d, %q", code, out)
	}
	removed := time.Now()
	err := cmd.Wait()
	if d := time.Since(removed); d > 5*time.Second {
		t.Errorf("elect exited %v after the leadership was removed", d)
	}
	if code := exitOf(err); code != cli.ExitLost || !strings.Contains(errb.String(), "lost") {
		t.Errorf("exit %d, stderr %q; want %d and a message", code, errb.String(), cli.ExitLost)
	}
}
