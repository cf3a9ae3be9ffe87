package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/cli"
	"github.com/go-dlock/dlock/internal/redistest"
)

// binary is the dlock command built once for the tests that spawn it.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "dlock")
	out, err := exec.Command("go", "build", "-o", binary, "github.com/go-dlock/dlock/cmd/dlock").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building dlock: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// dl runs the command line in process against srv and returns its exit
// code, stdout and stderr.
func dl(t *testing.T, srv *redistest.Server, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	args = append([]string{"--redis", "redis://" + srv.Addr()}, args...)
	err := cli.Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return cli.ExitCode(err), out.String(), errb.String()
}

// library starts a Redis and a library Client on it, both closed with t.
func library(t *testing.T) (*redistest.Server, *dlock.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := dlock.New(srv.Client(t))
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// spawn starts the dlock binary against srv.
func spawn(t *testing.T, srv *redistest.Server, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "DLOCK_REDIS=redis://"+srv.Addr())
	// A session of its own, with no controlling terminal, as under cron:
	// the same whether the tests run at a terminal or not (see group).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

func exitOf(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestRunExitStatuses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if code, _, _ := dl(t, srv, "run", "job", "--", "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("command's status 3 came out as %d", code)
	}
	if code, out, _ := dl(t, srv, "run", "job", "--", "sh", "-c", "echo $DLOCK_NAME $DLOCK_FENCE"); code != 0 || !strings.HasPrefix(out, "job ") || len(strings.Fields(out)) != 2 {
		t.Errorf("run printed %q (exit %d); want the name and the fence", out, code)
	}

	// Hold the lock from a spawned dlock, then contend in process.
	holder := spawn(t, srv, "run", "--metadata", "holder-1", "job", "--", "sleep", "3")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer holder.Process.Kill()
	waitHeld(t, srv, "job")
	if code, _, errOut := dl(t, srv, "run", "-n", "job", "--", "true"); code != 1 || !strings.Contains(errOut, "not obtained") {
		t.Errorf("-n on a held lock: exit %d, stderr %q; want 1 and a message", code, errOut)
	}
	if code, _, _ := dl(t, srv, "run", "-n", "-E", "7", "job", "--", "true"); code != 7 {
		t.Errorf("-n -E 7 on a held lock: exit %d, want 7", code)
	}
	start := time.Now()
	if code, _, _ := dl(t, srv, "run", "-w", "200ms", "job", "--", "true"); code != 1 {
		t.Errorf("-w 200ms on a held lock: exit %d, want 1", code)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("-w 200ms gave up after %v", d)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, args := range [][]string{
		{"run"},
		{"run", "name-only"},
		{"run", "name", "--"},
		{"run", "-n", "-w", "1s", "x", "--", "true"},
		{"run", "--ttl", "0s", "x", "--", "true"},
		{"run", "-s", "--fair", "x", "--", "true"},
		{"run", "-s", "-x", "x", "--", "true"},
		{"run", "-x", "--fair", "x", "--", "true"},
		{"run", "--bogus", "x", "--", "true"},
		{"--redis", "notaurl", "status", "x"},
		// Pool sizes go-redis panics on.
		{"--redis", "redis://" + srv.Addr() + "?pool_size=-1", "status", "x"},
		{"--redis", "redis://" + srv.Addr() + "?max_active_conns=4294967296", "run", "x", "--", "true"},
		{"--redis", "redis://" + srv.Addr() + ",redis://" + srv.Addr() + "?min_idle_conns=-2", "status", "x"},
		{"status"},
		{"unlock", "x"},
		{"set", "add", "pool"},
		{"list", "[bad"},
		{"run", "", "--", "true"},
	} {
		if code, _, errOut := dl(t, srv, args...); code != 2 || !strings.HasPrefix(errOut, "dlock: ") ||
			strings.Contains(errOut, "dlock: dlock:") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
	if code, _, errOut := dl(t, srv, "run", "x", "--", "/no/such/program"); code != 127 || errOut == "" {
		t.Errorf("missing program: exit %d, stderr %q; want 127", code, errOut)
	}
}

// TestHelpNamesEveryFlagsType: pflag reads a `quoted` word of a usage
// line as the flag's value name, so usage lines must not quote words.
func TestHelpNamesEveryFlagsType(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, sub := range [][]string{{"run"}, {"set", "run"}, {"status"}, {"list"}, {"unlock"}} {
		code, out, _ := dl(t, srv, append(sub, "--help")...)
		if code != 0 {
			t.Fatalf("%v --help: exit %d", sub, code)
		}
		if strings.Contains(strings.Join(sub, " "), "run") && !strings.Contains(out, "--metadata string") {
			t.Errorf("%v --help does not show --metadata string:\n%s", sub, out)
		}
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[0], "--") && f[1] == "dlock" {
				t.Errorf("%v --help: %q takes a quoted word for its value", sub, line)
			}
		}
	}
}

// waitHeld waits until some lock called name is held.
func waitHeld(t *testing.T, srv *redistest.Server, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, out, _ := dl(t, srv, "status", "--json", name)
		if strings.Contains(out, `"held": true`) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never held", name)
}

// TestRunNeverOverlaps: 4 dlock processes run a critical section guarded
// by a noclobber marker file, which fails if two are inside at once.
func TestRunNeverOverlaps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	script := `set -C
: > "$1/marker" || exit 99
echo "$DLOCK_FENCE" >> "$1/fences"
sleep 0.05
rm "$1/marker"`
	var wg sync.WaitGroup
	codes := make([]int, 4)
	outs := make([][]byte, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				out, err := spawn(t, srv, "run", "shared-job", "--", "sh", "-c", script, "sh", dir).CombinedOutput()
				if code := exitOf(err); code != 0 {
					codes[i], outs[i] = code, out
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, code := range codes {
		if code != 0 {
			t.Errorf("contender %d exited %d (99 = overlap): %s", i, code, outs[i])
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "fences"))
	if err != nil {
		t.Fatal(err)
	}
	fences := strings.Fields(string(data))
	if len(fences) != 20 {
		t.Fatalf("%d critical sections ran, want 20", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		if len(fences[i]) < len(fences[i-1]) || (len(fences[i]) == len(fences[i-1]) && fences[i] <= fences[i-1]) {
			t.Fatalf("fence %s after %s", fences[i], fences[i-1])
		}
	}
}

// TestLostLockStopsCommand: the lock's keys vanish while `sleep 30` runs;
// dlock stops it and exits 75 within the TTL plus the kill grace.
func TestLostLockStopsCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cmd := spawn(t, srv, "run", "--ttl", "1s", "--kill-after", "500ms", "doomed", "--", "sleep", "30")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, "doomed")
	flushed := time.Now()
	rdb.FlushAll(context.Background())
	err := cmd.Wait()
	if d := time.Since(flushed); d > time.Second+500*time.Millisecond+time.Second {
		t.Errorf("dlock exited %v after the flush; want within TTL + kill-after", d)
	}
	if code := exitOf(err); code != cli.ExitLost {
		t.Errorf("exit %d, want %d; stderr %s", code, cli.ExitLost, errb.String())
	}
	if !strings.Contains(errb.String(), "lost") {
		t.Errorf("stderr %q does not say the lease was lost", errb.String())
	}
}

func TestStatusListUnlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := spawn(t, srv, "run", "--metadata", "web-1:99", "--ttl", "30s", "deploy", "--", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer holder.Process.Kill()
	waitHeld(t, srv, "deploy")
	dl(t, srv, "set", "add", "pool", "a", "b")

	code, out, _ := dl(t, srv, "status", "--json", "deploy")
	var sts []map[string]any
	if err := json.Unmarshal([]byte(out), &sts); err != nil || code != 0 || len(sts) != 1 {
		t.Fatalf("status --json: exit %d, %v: %s", code, err, out)
	}
	st := sts[0]
	if st["held"] != true || st["holder"] != "web-1:99" || st["kind"] != "mutex" {
		t.Errorf("status --json = %v", st)
	}
	if ttl, _ := st["ttl_ms"].(float64); ttl <= 0 || ttl > 30000 {
		t.Errorf("ttl_ms = %v", st["ttl_ms"])
	}
	if fence, _ := st["fence"].(float64); fence <= 0 {
		t.Errorf("fence = %v", st["fence"])
	}
	if code, out, _ := dl(t, srv, "status", "deploy"); code != 0 || !strings.Contains(out, "web-1:99") || !strings.Contains(out, "HOLDER") {
		t.Errorf("status table: %q", out)
	}
	if code, out, _ := dl(t, srv, "status", "nothing-here"); code != 0 || !strings.Contains(out, "free") {
		t.Errorf("status of an unused name: %q", out)
	}

	// A lock of every other kind, through the library.
	rdb := srv.Client(t)
	c := dlock.New(rdb)
	defer c.Close()
	if _, err := c.FairMutex("queue-job", dlock.WithTTL(30*time.Second)).Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RWMutex("catalog", dlock.WithTTL(30*time.Second)).RLock(t.Context()); err != nil {
		t.Fatal(err)
	}
	code, out, _ = dl(t, srv, "list")
	for _, want := range []string{"deploy", "mutex", "pool", "set", "2/2 free", "queue-job", "fair", "catalog", "rw", "1 readers"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = dl(t, srv, "list", "--json", "po*")
	if err := json.Unmarshal([]byte(out), &sts); err != nil || code != 0 || len(sts) != 1 || sts[0]["kind"] != "set" {
		t.Errorf("list --json po*: %s", out)
	}

	code, out, _ = dl(t, srv, "unlock", "--force", "deploy")
	if code != 0 || !strings.Contains(out, "removed mutex deploy held by web-1:99") {
		t.Errorf("unlock --force: exit %d: %q", code, out)
	}
	if code, _, _ := dl(t, srv, "run", "-n", "deploy", "--", "true"); code != 0 {
		t.Errorf("lock still held after unlock --force (exit %d)", code)
	}

	// A set's members are freed one at a time, and a semaphore's holders
	// counted.
	pool := c.MutexSet("pool", dlock.WithTTL(30*time.Second))
	if _, err := pool.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := dl(t, srv, "unlock", "--force", "pool"); code != 2 || !strings.Contains(errOut, "--member") {
		t.Errorf("unlock --force of a held set: exit %d, %q, %q; want a usage error naming --member", code, out, errOut)
	}
	sem := c.Semaphore("slots", 4, dlock.WithTTL(30*time.Second))
	for range 2 {
		if _, err := sem.Acquire(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, _ := dl(t, srv, "unlock", "--force", "slots"); code != 0 || !strings.Contains(out, "removed 2 holders of semaphore slots (2 permits)") {
		t.Errorf("unlock --force of a semaphore: exit %d, %q", code, out)
	}
}

// spawnAll runs n dlock commands at once, the i-th with args(i), and
// returns their exit statuses and outputs.
func spawnAll(t *testing.T, srv *redistest.Server, n int, args func(i int) []string) ([]int, [][]byte) {
	codes, outs := make([]int, n), make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := spawn(t, srv, args(i)...).CombinedOutput()
			codes[i], outs[i] = exitOf(err), out
		}()
	}
	wg.Wait()
	return codes, outs
}

// TestSetRun: 6 concurrent jobs on a set of 3: at most 3 at once, each
// member used by one job at a time (a marker file per member).
func TestSetRun(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if code, _, errOut := dl(t, srv, "set", "add", "devs", "d1", "d2", "d3"); code != 0 {
		t.Fatalf("set add: %d %s", code, errOut)
	}
	dir := t.TempDir()
	script := `set -C
: > "$1/$DLOCK_MEMBER" || exit 99
n=$(ls "$1" | wc -l); [ "$n" -le 3 ] || exit 98
echo "$DLOCK_MEMBER" >> "$1.log"
sleep 0.2
rm "$1/$DLOCK_MEMBER"`
	codes, outs := spawnAll(t, srv, 6, func(int) []string { return []string{"set", "run", "devs", "--", "sh", "-c", script, "sh", dir} })
	for i, code := range codes {
		if code != 0 {
			t.Errorf("job %d exited %d (99: member held twice, 98: over 3 at once): %s", i, code, outs[i])
		}
	}
	data, _ := os.ReadFile(dir + ".log")
	used := map[string]int{}
	for _, m := range strings.Fields(string(data)) {
		used[m]++
	}
	if len(used) != 3 || used["d1"]+used["d2"]+used["d3"] != 6 {
		t.Errorf("members used: %v; want d1, d2, d3, 6 jobs in all", used)
	}
	if code, _, errOut := dl(t, srv, "set", "run", "empty-set", "--", "true"); code != 1 || !strings.Contains(errOut, "no members") {
		t.Errorf("set run on an empty set: exit %d, %q", code, errOut)
	}
	if code, out, _ := dl(t, srv, "set", "list", "devs"); code != 0 || strings.Count(out, "free") != 3 {
		t.Errorf("set list:\n%s", out)
	}
}

// TestSemRun: 6 concurrent jobs of 1 or 2 permits on a semaphore of 3:
// never more than 3 permits held at once (a marker file per permit).
func TestSemRun(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	script := `set -C
got=0 mine=
for i in 0 1 2; do
  [ "$got" -lt "$DLOCK_PERMITS" ] || break
  if true 2>/dev/null > "$1/slot-$i"; then got=$((got+1)) mine="$mine $1/slot-$i"; fi
done
[ "$got" -eq "$DLOCK_PERMITS" ] || exit 98
echo "$DLOCK_NAME $DLOCK_PERMITS $DLOCK_FENCE" >> "$1.log"
sleep 0.2
rm $mine`
	codes, outs := spawnAll(t, srv, 6, func(i int) []string {
		if i%3 == 0 { // flags before the name, too
			return []string{"sem", "run", "--size", "3", "--permits", fmt.Sprint(1 + i%2), "jobs", "--", "sh", "-c", script, "sh", dir}
		}
		return []string{"sem", "run", "jobs", "--size", "3", "--permits", fmt.Sprint(1 + i%2), "--", "sh", "-c", script, "sh", dir}
	})
	for i, code := range codes {
		if code != 0 {
			t.Errorf("job %d exited %d (98: over 3 permits at once): %s", i, code, outs[i])
		}
	}
	data, _ := os.ReadFile(dir + ".log")
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 6 || !strings.HasPrefix(lines[0], "jobs ") {
		t.Errorf("jobs logged %q; want 6 lines of name, permits, fence", lines)
	}

	// Usage errors, and -n while all permits are held.
	for _, args := range [][]string{
		{"sem", "run", "jobs", "--", "true"},
		{"sem", "run", "jobs", "--size", "0", "--", "true"},
		{"sem", "run", "jobs", "--size", "3", "--permits", "4", "--", "true"},
		{"sem", "run", "jobs", "--size", "3", "true"},
	} {
		if code, _, errOut := dl(t, srv, args...); code != 2 {
			t.Errorf("%q: exit %d, %q; want 2", args, code, errOut)
		}
	}
	holder := spawn(t, srv, "sem", "run", "--metadata", "holder-1", "jobs", "--size", "3", "--permits", "3", "--", "sleep", "3")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, out, _ := dl(t, srv, "status", "jobs")
		if code == 0 && strings.Contains(out, "3/3 permits in use") && strings.Contains(out, "holder-1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status while held:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _, errOut := dl(t, srv, "sem", "run", "-n", "jobs", "--size", "3", "--", "true"); code != 1 || !strings.Contains(errOut, "not obtained") {
		t.Errorf("-n while full: exit %d, %q", code, errOut)
	}
	code, out, _ := dl(t, srv, "list", "--json", "jobs")
	var sts []map[string]any
	if err := json.Unmarshal([]byte(out), &sts); err != nil || code != 0 || len(sts) != 1 || sts[0]["kind"] != "semaphore" ||
		sts[0]["size"] != 3.0 || sts[0]["in_use"] != 3.0 {
		t.Errorf("list --json jobs: %s", out)
	}
}

// A flag put after the lock's name is a usage error, found before the
// lock is taken, not a command that cannot start once it is.
func TestFlagAfterNameRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, args := range [][]string{
		{"run", "late-flag", "-w", "1s", "--", "true"},
		{"set", "run", "late-flag", "-n", "--", "true"},
	} {
		code, _, stderr := dl(t, srv, args...)
		if code != 2 || !strings.Contains(stderr, "flags go before the name") {
			t.Errorf("%q: exit %d, %q; want 2 and a word on where flags go", args, code, stderr)
		}
	}
	// After "--", a command may start with "-".
	if code, _, stderr := dl(t, srv, "run", "dash", "--", "-no-such-command"); code != 127 {
		t.Errorf("run dash -- -no-such-command: exit %d, %q; want 127 (cannot run it)", code, stderr)
	}
}

// TestUnknownSubcommandRefused: set and sem without a command, or with
// one they do not have, are usage errors (2) that run nothing, not their
// help and exit 0: a cron job's "dlock sem rnu" must not pass.
func TestUnknownSubcommandRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		{"set"},
		{"sem"},
		{"set", "ad", "pool", "a"},
		{"set", "runn", "pool", "--", "touch", marker},
		{"sem", "rnu", "deploys", "--", "touch", marker},
	} {
		code, stdout, stderr := dl(t, srv, args...)
		if code != 2 || !strings.Contains(stderr, "run") || strings.Count(stderr, "dlock") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and the commands there are", args, code, stdout, stderr)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a mistyped subcommand ran the command")
	}
	if code, stdout, _ := dl(t, srv, "set", "--help"); code != 0 || !strings.Contains(stdout, "add") {
		t.Errorf("set --help: exit %d, %q", code, stdout)
	}
}

// failingWriter fails every write, as a full disk or a closed pipe does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestOutputFailureExits1: status and list whose output cannot be written
// exit 1 and say so, in table and JSON alike, rather than 0 with nothing
// written, or 2 as if the arguments were wrong.
func TestOutputFailureExits1(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, args := range [][]string{{"list"}, {"list", "--json"}, {"status", "x"}, {"status", "--json", "x"}} {
		var errb bytes.Buffer
		err := cli.Run(context.Background(), append([]string{"--redis", "redis://" + srv.Addr()}, args...), strings.NewReader(""), failingWriter{}, &errb)
		if code := cli.ExitCode(err); code != 1 || !strings.Contains(errb.String(), "writing the output") {
			t.Errorf("dlock %v with its output failing: exit %d, stderr %q; want 1", args, code, errb.String())
		}
	}
}

// TestShortWaitOnAHeldLockIsAConflict: a -w that ends while a try is on
// its way, its reply not come yet, means the lock was held for all of -w,
// not that Redis is down: exit 1 (-E), not 69, when Redis answers.
func TestShortWaitOnAHeldLockIsAConflict(t *testing.T) {
	t.Parallel()
	srv, c := library(t)
	held, err := c.Mutex("slowtry").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	proxy := redistest.StartProxy(t, srv.Addr())
	delivered := proxy.DelayReply("slowtry", 500*time.Millisecond)
	var out, errb bytes.Buffer
	err = cli.Run(context.Background(), []string{"--redis", "redis://" + proxy.Addr(), "run", "-w", "100ms", "slowtry", "--", "true"},
		strings.NewReader(""), &out, &errb)
	if code := cli.ExitCode(err); code != 1 {
		t.Errorf("run -w 100ms on a held lock, its try's reply late: exit %d, stderr %q; want 1", code, errb.String())
	}
	<-delivered
}

// TestBadDatabaseIsNotAConflict: a URL naming a database the server does not have is a bad URL (2), not
// exit 1, which is run's default for "held by another process": a cron
// job must not read a misconfiguration as a lock held elsewhere.
func TestBadDatabaseIsNotAConflict(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var out, errb bytes.Buffer
	err := cli.Run(context.Background(), []string{"--redis", "redis://" + srv.Addr() + "/99", "run", "job", "--", "true"},
		strings.NewReader(""), &out, &errb)
	if code := cli.ExitCode(err); code == cli.ExitConflict {
		t.Errorf("run on redis://…/99 (no such database) exited %d, the conflict status; stderr %q", code, errb.String())
	}
}

// TestStatusFreeNamePrintable: the line status prints for a free lock shows its name as the table
// does: quoted when it holds a newline or control bytes.
func TestStatusFreeNamePrintable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	code, out, _ := dl(t, srv, "status", "a\nb\x1b[2J")
	if code != 0 || strings.Count(out, "\n") != 1 || strings.Contains(out, "\x1b") {
		t.Errorf("status of a free lock named a\\nb\\x1b[2J printed %q (exit %d); want one line, the name quoted", out, code)
	}
}

// TestBusyRedisIsUnavailable: a Redis busy with a script that runs long
// (BUSY replies, which pass by themselves) is unavailable (69), not a bad
// URL (2) nor a lock held elsewhere (1).
func TestBusyRedisIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	end := srv.Busy(t)
	code, _, stderr := dl(t, srv, "run", "-n", "job", "--", "true")
	end()
	if code != cli.ExitUnavailable {
		t.Errorf("run on a busy Redis exited %d (%s); want %d", code, strings.TrimSpace(stderr), cli.ExitUnavailable)
	}
}

// TestMaxClientsIsUnavailable: a Redis with no room for another client
// (it writes its error and hangs up before go-redis' first command: a
// broken pipe) is unavailable (69), not a lock held elsewhere (1).
func TestMaxClientsIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := t.Context()
	if err := admin.ConfigSet(ctx, "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := dl(t, srv, "run", "-n", "job", "--", "true")
	if err := admin.ConfigSet(ctx, "maxclients", "100").Err(); err != nil {
		t.Fatal(err)
	}
	if code != cli.ExitUnavailable {
		t.Errorf("run on a full Redis exited %d (%s); want %d", code, strings.TrimSpace(stderr), cli.ExitUnavailable)
	}
}

// TestUnlockEmptyMemberIsUsage: `--member "$M"` with M unset is a usage
// error, not a force-unlock of every lock of that name.
func TestUnlockEmptyMemberIsUsage(t *testing.T) {
	t.Parallel()
	srv, c := library(t)
	ctx := t.Context()
	held, err := c.Mutex("pool").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	code, out, errOut := dl(t, srv, "unlock", "--force", "--member", "", "pool")
	if ok, _ := held.Held(ctx); !ok {
		t.Errorf("unlock --force --member \"\" pool removed the mutex pool (exit %d, stdout %q)", code, out)
	}
	if code != 2 {
		t.Errorf("unlock --force --member \"\" pool: exit %d, stderr %q; want 2 (usage)", code, errOut)
	}
}

// TestEmptyRedisFlagIsUsage: `--redis "$URL"` with URL unset is a usage
// error: falling back to $DLOCK_REDIS or the default Redis would take the
// lock on a server the other machines do not use.
func TestEmptyRedisFlagIsUsage(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("DLOCK_REDIS", "redis://"+srv.Addr()) // stands for a local Redis
	for _, flag := range []string{"--redis", "--redis-file"} {
		var out, errb bytes.Buffer
		err := cli.Run(context.Background(), []string{flag, "", "run", "job", "--", "echo", "ran"},
			strings.NewReader(""), &out, &errb)
		if code := cli.ExitCode(err); code != 2 || out.Len() > 0 {
			t.Errorf("%s \"\": exit %d, stdout %q, stderr %q; want 2 (usage: empty), the command not run", flag, code, out.String(), errb.String())
		}
	}
}

// TestTinyWaitOnAFreeLockDoesNotClaimItHeld: a -w too short for Redis to
// answer says so, not that the lock is held (it is free here).
func TestTinyWaitOnAFreeLockDoesNotClaimItHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, w := range []string{"1ns", "1µs"} {
		code, _, errOut := dl(t, srv, "run", "-w", w, "nobody-holds-this", "--", "true")
		if code != 1 || strings.Contains(errOut, "held") || !strings.Contains(errOut, "not obtained within") {
			t.Errorf("run -w %s on a free lock: exit %d, stderr %q; want 1, and no word of it being held", w, code, errOut)
		}
	}
}

// TestRunClusterReshardAtRelease: the command ends while the lock's slot
// migrates; the release, refused (TRYAGAIN) until the move completes, is
// sent again until it gets through: run exits 0 and leaves the lock free
// (it exited 1, and the lock was held for its TTL by a process gone).
func TestRunClusterReshardAtRelease(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	const name = "moving"
	mv := cl.MoveSlotOf(t, "dlock:{"+name+"}:mutex")
	code := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		var out bytes.Buffer
		urls := make([]string, 0, len(cl.Addrs()))
		for _, a := range cl.Addrs() {
			urls = append(urls, "redis://"+a)
		}
		args := []string{"--cluster", "--redis", strings.Join(urls, ","), "run", "--ttl", "10s", name, "--", "sleep", "1"}
		code <- cli.ExitCode(cli.Run(context.Background(), args, strings.NewReader(""), &out, &errb))
	}()
	time.Sleep(500 * time.Millisecond)
	mv.Begin()
	time.Sleep(1500 * time.Millisecond) // the command ends meanwhile
	mv.Migrate()
	mv.Finish()
	if got := <-code; got != 0 {
		t.Errorf("dlock run exited %d: %s", got, errb.String())
	}
	c := dlock.New(cl.Client(t))
	defer c.Close()
	st, err := c.Mutex(name).Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Held {
		t.Errorf("after the move, the lock of the dlock run that exited is still held (TTL %v)", st.TTL)
	}
}

// TestRunSidesOfOneRWMutex: -s and -x take the read and the write side of
// one read/write lock, as flock(1)'s -s and -x do: -s holders share it,
// and a -x holder excludes both.
func TestRunSidesOfOneRWMutex(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		holder, contender string
		want              int
	}{
		{"-s", "-x", cli.ExitConflict},
		{"-x", "-s", cli.ExitConflict},
		{"-x", "-x", cli.ExitConflict},
		{"-s", "-s", 0},
	} {
		t.Run(c.holder+" then "+c.contender, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			holder := spawn(t, srv, "run", c.holder, "catalog", "--", "sleep", "30")
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			defer holder.Wait()
			defer holder.Process.Kill()
			waitHeld(t, srv, "catalog")
			code, out, errOut := dl(t, srv, "run", "-n", c.contender, "catalog", "--", "echo", "inside")
			if code != c.want {
				t.Errorf("run -n %s catalog while run %s catalog holds it: exit %d, stdout %q, stderr %q; want %d",
					c.contender, c.holder, code, out, errOut, c.want)
			}
		})
	}
}

// TestRunReleaseUnreachableIsUnavailable: a command that ran and exited 0,
// whose lock could not be released because Redis went away, exits 69,
// not -E's code, which says that the command did not run.
func TestRunReleaseUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	dir := t.TempDir()
	ready, gate := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	cmd := spawn(t, srv, "run", "-E", "3", "--ttl", "30s", "job", "--", "sh", "-c",
		`: > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done`, "sh", ready, gate)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
	srv.Kill(t)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(cmd.Wait()); code != cli.ExitUnavailable {
		t.Errorf("the command exited 0 and Redis was gone at the release: exit %d, stderr %q; want %d", code, errb.String(), cli.ExitUnavailable)
	}
}
