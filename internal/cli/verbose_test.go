package cli_test

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// inOrder checks that text has a line matching each pattern (a whole
// line), in the patterns' order; other lines may come between.
func inOrder(t *testing.T, what, text string, patterns ...string) {
	t.Helper()
	lines := strings.Split(text, "\n")
	i := 0
	for _, p := range patterns {
		re := regexp.MustCompile("^" + p + "$")
		for i < len(lines) && !re.MatchString(lines[i]) {
			i++
		}
		if i == len(lines) {
			t.Errorf("%s: no line %q after those before it in:\n%s", what, p, text)
			return
		}
		i++
	}
}

// TestVerboseRunLogsEachStep: with -v, run says where it connects, what
// it waits for, the lease it got (its fence is the command's
// DLOCK_FENCE) after how long, the command's pid and status, and the
// release; without -v a run that succeeds leaves stderr empty.
func TestVerboseRunLogsEachStep(t *testing.T) {
	t.Parallel()
	srv, c := library(t)
	held, err := c.Mutex("job").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		released <- held.Unlock(t.Context())
	}()
	code, out, errOut := dl(t, srv, "run", "-v", "job", "--", "sh", "-c", `echo "$DLOCK_FENCE"; exit 3`)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	fence := strings.TrimSpace(out)
	if code != 3 || fence == "" {
		t.Fatalf("run -v: exit %d, stdout %q; want 3 and the fence", code, out)
	}
	inOrder(t, "run -v", errOut,
		`dlock: connecting to redis://`+regexp.QuoteMeta(srv.Addr())+` \(from --redis\)`,
		`dlock: waiting for mutex job`,
		`dlock: acquired mutex job: fence `+fence+`, ttl 10s, waited \S+`,
		`dlock: started sh \(pid [1-9][0-9]*\)`,
		`dlock: sh exited with status 3`,
		`dlock: releasing mutex job`,
		`dlock: released mutex job`,
	)
	if m := regexp.MustCompile(`waited (\S+)`).FindStringSubmatch(errOut); m != nil {
		if d, err := time.ParseDuration(m[1]); err != nil || d < 200*time.Millisecond || d > 5*time.Second {
			t.Errorf("run -v waited %q for a lock held 300ms more", m[1])
		}
	}

	if code, _, errOut := dl(t, srv, "run", "job", "--", "true"); code != 0 || errOut != "" {
		t.Errorf("run without -v: exit %d, stderr %q; want 0 and nothing", code, errOut)
	}
}

// TestVerboseNamesTheLock: each command that takes a lock names its kind
// in its -v lines, and what it got: the member, the permits, the term;
// -n and -w say how they tried and that they did not get it; the other
// commands say where they connect.
func TestVerboseNamesTheLock(t *testing.T) {
	t.Parallel()
	srv, c := library(t)
	if _, err := c.Mutex("busy", dlock.WithTTL(time.Minute)).Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := dl(t, srv, "set", "add", "pool", "a", "b"); code != 0 {
		t.Fatalf("set add: exit %d: %s", code, errOut)
	}
	connecting := `dlock: connecting to redis://` + regexp.QuoteMeta(srv.Addr()) + ` \(from --redis\)`
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"run", "-v", "--fair", "f", "--", "true"}, 0, []string{
			connecting,
			`dlock: waiting for fair mutex f`,
			`dlock: acquired fair mutex f: fence [1-9][0-9]*, ttl 10s, waited \S+`,
			`dlock: released fair mutex f`}},
		{[]string{"-v", "run", "-s", "--ttl", "3s", "r", "--", "true"}, 0, []string{
			`dlock: waiting for rw lock r \(read side\)`,
			`dlock: acquired rw lock r \(read side\): fence [1-9][0-9]*, ttl 3s, waited \S+`,
			`dlock: released rw lock r \(read side\)`}},
		{[]string{"set", "run", "-v", "pool", "--", "true"}, 0, []string{
			connecting,
			`dlock: waiting for a member of set pool`,
			`dlock: acquired member [ab] of set pool: fence [1-9][0-9]*, ttl 10s, waited \S+`,
			`dlock: started true \(pid [1-9][0-9]*\)`,
			`dlock: true exited with status 0`,
			`dlock: releasing member [ab] of set pool`,
			`dlock: released member [ab] of set pool`}},
		{[]string{"sem", "run", "slots", "--size", "3", "--permits", "2", "-v", "--", "true"}, 0, []string{
			connecting,
			`dlock: waiting for semaphore slots \(2 of 3 permits\)`,
			`dlock: acquired semaphore slots \(2 of 3 permits\): fence [1-9][0-9]*, ttl 10s, waited \S+`,
			`dlock: released semaphore slots \(2 of 3 permits\)`}},
		{[]string{"elect", "-v", "boss", "--", "true"}, 0, []string{
			connecting,
			`dlock: waiting for election boss`,
			`dlock: acquired election boss \(term [1-9][0-9]*\): fence [1-9][0-9]*, ttl 10s, waited \S+`,
			`dlock: releasing election boss \(term [1-9][0-9]*\)`,
			`dlock: released election boss \(term [1-9][0-9]*\)`}},
		{[]string{"run", "-v", "-n", "busy", "--", "true"}, 1, []string{
			`dlock: trying mutex busy without waiting \(-n\)`,
			`dlock: mutex busy not acquired after \S+`,
			`dlock: busy is held by another process; not obtained`}},
		{[]string{"run", "-v", "-w", "100ms", "busy", "--", "true"}, 1, []string{
			`dlock: waiting up to 100ms for mutex busy`,
			`dlock: mutex busy not acquired after \S+`,
			`dlock: busy not obtained within 100ms; gave up`}},
		{[]string{"-v", "status", "busy"}, 0, []string{connecting}},
		{[]string{"-v", "list"}, 0, []string{connecting}},
		{[]string{"-v", "set", "list", "pool"}, 0, []string{connecting}},
		{[]string{"--verbose", "unlock", "--force", "nothing"}, 0, []string{connecting}},
		{[]string{"-v", "leader", "nobody-here"}, 1, []string{connecting, `dlock: nobody leads election nobody-here`}},
	} {
		code, _, errOut := dl(t, srv, tc.args...)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s", tc.args, code, tc.code, errOut)
		}
		inOrder(t, strings.Join(tc.args, " "), errOut, tc.want...)
	}
}

// TestVerboseShowsNoSecret: -v shows the Redis URL of --redis without
// its password, and never a lease's token.
func TestVerboseShowsNoSecret(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := aclUser(t, srv)
	cmd := spawn(t, srv, "--redis", url, "-v", "run", "job", "--", "sh", "-c", "cat >/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitHeld(t, srv, "job")
	tokens := tokensIn(t, srv)
	stdin.Close()
	if code := exitOf(cmd.Wait()); code != 0 {
		t.Fatalf("run -v: exit %d: %s", code, errb.String())
	}
	errOut := errb.String()
	if len(tokens) == 0 {
		t.Fatal("found no token in Redis while the lock was held")
	}
	for _, tok := range tokens {
		if strings.Contains(errOut, tok) {
			t.Errorf("run -v printed the lease's token %s:\n%s", tok, errOut)
		}
	}
	if strings.Contains(errOut, password) {
		t.Errorf("run -v printed the password:\n%s", errOut)
	}
	inOrder(t, "run -v", errOut, `dlock: connecting to redis://dlock:xxxxx@`+regexp.QuoteMeta(srv.Addr())+` \(from --redis\)`,
		`dlock: acquired mutex job: fence [1-9][0-9]*, ttl 10s, waited \S+`)
}

// tokensIn returns the lease tokens (32 hex digits) in the string keys
// of srv: an owner key starts with its holder's.
func tokensIn(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	rdb := srv.Client(t)
	keys, err := rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	hex := regexp.MustCompile(`\b[0-9a-f]{32}\b`)
	var tokens []string
	for _, k := range keys {
		if v, err := rdb.Get(t.Context(), k).Result(); err == nil {
			tokens = append(tokens, hex.FindAllString(v, -1)...)
		}
	}
	return tokens
}

// TestVerboseSignal: -v says that run passed a signal on to the command
// and that the signal ended it.
func TestVerboseSignal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := spawn(t, srv, "run", "-v", "sig", "--", "sh", "-c", `echo $$ > "$0"; exec sleep 30`, pidFile)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pidOf(t, pidFile) // the command runs: the signal is not one to wait for the lock
	cmd.Process.Signal(syscall.SIGTERM)
	if code := exitOf(cmd.Wait()); code != 128+int(syscall.SIGTERM) {
		t.Errorf("run after SIGTERM: exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	inOrder(t, "run -v", errb.String(),
		`dlock: started sh \(pid [1-9][0-9]*\)`,
		`dlock: passed signal terminated on to sh`,
		`dlock: sh was killed by signal terminated \(status 143\)`,
		`dlock: released mutex sig`)
}

// TestVerboseLeaderWatch: leader --watch -v logs each leader Redis
// reports, and that it stopped.
func TestVerboseLeaderWatch(t *testing.T) {
	t.Parallel()
	srv, c := library(t)
	w := watch(t, srv, "-v", "vw")
	if line := w.next(); line != "nobody leads election vw" {
		t.Errorf("first line: %q", line)
	}
	l := campaign(t, c, "vw", "a")
	w.next()
	if err := l.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.next()
	w.kill(syscall.SIGINT)
	if code := w.wait(); code != 0 {
		t.Errorf("leader --watch -v after SIGINT: exit %d", code)
	}
	inOrder(t, "leader --watch -v", w.stderr.String(),
		`dlock: connecting to redis://`+regexp.QuoteMeta(srv.Addr())+` \(from \$DLOCK_REDIS\)`,
		`dlock: election vw: observed a leads, term [1-9][0-9]*`,
		`dlock: election vw: observed nobody leads`,
		`dlock: stopped following election vw`)
}
