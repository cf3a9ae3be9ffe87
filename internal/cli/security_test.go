package cli_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/redistest"
)

const password = "pw-Zq81-never-shown"

// dlEnv spawns the dlock binary with env added and returns its exit code,
// stdout and stderr; none of them may show the password.
func dlEnv(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := exitOf(cmd.Run())
	if strings.Contains(out.String()+errb.String(), password) {
		t.Errorf("dlock %v printed the password:\n%s%s", args, out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

// aclUser creates the README's dlock user on srv, less the rules in
// without, and returns its URL (with the password).
func aclUser(t *testing.T, srv *redistest.Server, without ...string) string {
	t.Helper()
	rules := slices.DeleteFunc(redistest.ACLRules(t, "../../README.md", password), func(a any) bool {
		return slices.Contains(without, a.(string))
	})
	if err := srv.Client(t).Do(t.Context(), rules...).Err(); err != nil {
		t.Fatal(err)
	}
	return "redis://dlock:" + password + "@" + srv.Addr()
}

// everyCommand is one use of each dlock subcommand that talks to Redis.
var everyCommand = [][]string{
	{"run", "job", "--", "true"},
	{"run", "--fair", "job", "--", "true"},
	{"run", "-s", "job", "--", "true"},
	{"run", "-x", "job", "--", "true"},
	{"set", "add", "pool", "a", "b"},
	{"set", "run", "pool", "--", "true"},
	{"set", "list", "pool"},
	{"status", "job"},
	{"status", "--json", "pool"},
	{"list"},
	{"unlock", "--force", "job"},
	{"set", "remove", "pool", "a", "b"},
	{"sem", "run", "slots", "--size", "2", "--", "true"},
	{"elect", "boss", "--", "true"},
}

// TestCommandUnderACL: every command works for a user with exactly the
// README's rules, the URL given in $DLOCK_REDIS, and a missing rule is
// named on stderr.
func TestCommandUnderACL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	env := []string{"DLOCK_REDIS=" + aclUser(t, srv)}
	for _, args := range everyCommand {
		if code, _, errOut := dlEnv(t, env, args...); code != 0 {
			t.Errorf("dlock %v under the README's ACL: exit %d: %s", args, code, errOut)
		}
	}

	limited := redistest.Start(t)
	env = []string{"DLOCK_REDIS=" + aclUser(t, limited, "+time")}
	code, _, errOut := dlEnv(t, env, "run", "job", "--", "true")
	if code != 77 || !strings.Contains(errOut, "lacks a permission dlock needs") {
		t.Errorf("run without +time: exit %d, stderr %q; want 77 (EX_NOPERM) and the missing permission named", code, errOut)
	}

	// A user that may not listen cannot follow an election: leader
	// --watch stops at once and says why.
	deaf := redistest.Start(t)
	env = []string{"DLOCK_REDIS=" + aclUser(t, deaf, "&dlock:*")}
	code, _, errOut = dlEnv(t, env, "leader", "--watch", "boss")
	if code != 1 || !strings.Contains(errOut, "cannot observe election") || !strings.Contains(errOut, "lacks a permission dlock needs") {
		t.Errorf("leader --watch without the channel rule: exit %d, stderr %q; want exit 1 and the missing permission named", code, errOut)
	}
}

// TestCommandOverTLS: the command over redis-server's TLS port, with a
// rediss:// URL and the CA and client certificate given by flags or the
// environment; without the CA it fails and says why.
func TestCommandOverTLS(t *testing.T) {
	t.Parallel()
	srv, files := redistest.StartTLS(t)
	url := "rediss://" + srv.TLSAddr()
	flags := []string{"--redis", url, "--tls-ca", files.CA, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey}
	for _, args := range everyCommand {
		if code, _, errOut := dlEnv(t, nil, append(slices.Clone(flags), args...)...); code != 0 {
			t.Errorf("dlock %v over TLS: exit %d: %s", args, code, errOut)
		}
	}
	env := []string{"DLOCK_REDIS=" + url, "DLOCK_TLS_CA=" + files.CA,
		"DLOCK_TLS_CERT=" + files.ClientCert, "DLOCK_TLS_KEY=" + files.ClientKey}
	if code, _, errOut := dlEnv(t, env, "run", "job", "--", "true"); code != 0 {
		t.Errorf("run over TLS, files from the environment: exit %d: %s", code, errOut)
	}
	code, _, errOut := dlEnv(t, nil, "--redis", url, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey, "run", "-w", "2s", "job", "--", "true")
	if code == 0 || !strings.Contains(errOut, "certificate") {
		t.Errorf("run over TLS without the CA: exit %d, stderr %q; want a certificate error", code, errOut)
	}
	code, _, errOut = dlEnv(t, nil, "--redis", "redis://"+srv.Addr(), "--tls-ca", files.CA, "run", "job", "--", "true")
	if code != 2 || !strings.Contains(errOut, "rediss://") {
		t.Errorf("--tls-ca with a redis:// URL: exit %d, stderr %q; want a usage error", code, errOut)
	}
}

// TestPasswordNeverShown: the URL can come from the environment or a file,
// and the password appears in no output: not in help, not in errors about
// a bad URL or a wrong password, not in status.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := aclUser(t, srv)
	file := filepath.Join(t.TempDir(), "redis-url")
	if err := os.WriteFile(file, []byte(url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := dlEnv(t, nil, "--redis-file", file, "run", "job", "--", "true"); code != 0 {
		t.Errorf("--redis-file: exit %d: %s", code, errOut)
	}
	if code, _, errOut := dlEnv(t, []string{"DLOCK_REDIS_FILE=" + file}, "status", "job"); code != 0 {
		t.Errorf("$DLOCK_REDIS_FILE: exit %d: %s", code, errOut)
	}
	env := []string{"DLOCK_REDIS=" + url}
	if code, out, _ := dlEnv(t, env, "--help"); code != 0 || !strings.Contains(out, "--redis-file") {
		t.Errorf("--help: exit %d:\n%s", code, out)
	}
	dlEnv(t, env, "run", "--help")
	dlEnv(t, env, "status", "job")
	wrong := []string{"DLOCK_REDIS=redis://dlock:" + password + "x@" + srv.Addr()}
	for _, args := range [][]string{{"run", "job", "--", "true"}, {"status", "job"}} {
		if code, _, errOut := dlEnv(t, wrong, args...); code != 77 || !strings.Contains(errOut, "WRONGPASS") {
			t.Errorf("dlock %v with a wrong password: exit %d, stderr %q; want 77 (EX_NOPERM), not the conflict code", args, code, errOut)
		}
	}
	bad := []string{"DLOCK_REDIS=redis://dlock:" + password + "@127.0.0.1:notaport"}
	if code, _, errOut := dlEnv(t, bad, "run", "job", "--", "true"); code != 2 || !strings.Contains(errOut, "xxxxx") {
		t.Errorf("bad URL: exit %d, stderr %q; want a usage error with the password hidden", code, errOut)
	}
	// A / in a password, unescaped, ends the URL's host: the parser's
	// message quotes what follows the : as a port.
	for _, pw := range []string{password[:6] + "/" + password[6:], "6379/" + password} {
		slashed := []string{"DLOCK_REDIS=redis://dlock:" + pw + "@" + srv.Addr()}
		code, _, errOut := dlEnv(t, slashed, "status", "job")
		if code != 2 || strings.Contains(errOut, password[:6]) || strings.Contains(errOut, password[6:]) || !strings.Contains(errOut, "%2F") {
			t.Errorf("a password with a /: exit %d, stderr %q; want a usage error that shows no part of it", code, errOut)
		}
	}
}

// TestUnreachableRedis: with no Redis at the URL, every command exits 69
// (EX_UNAVAILABLE) at once, not the conflict code and without waiting for
// a lock, with one line on stderr that names no prefix twice.
func TestUnreachableRedis(t *testing.T) {
	t.Parallel()
	// Port 1: nothing listens there, and no test's server can take it.
	const addr = "127.0.0.1:1"
	env := []string{"DLOCK_REDIS=redis://" + addr}
	for _, args := range [][]string{
		{"run", "job", "--", "true"},
		{"--redlock", "--redis", "redis://" + addr + ",redis://127.0.0.1:2,redis://127.0.0.1:3", "run", "job", "--", "true"},
		{"run", "-n", "job", "--", "true"},
		{"run", "-w", "1s", "job", "--", "true"},
		{"run", "-w", "1s", "--fair", "job", "--", "true"},
		{"set", "run", "pool", "--", "true"},
		{"set", "add", "pool", "a"},
		{"status", "job"},
		{"list"},
		{"unlock", "--force", "job"},
	} {
		code, _, errOut := dlEnv(t, env, args...)
		if code != 69 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "cannot reach Redis") ||
			strings.Count(errOut, "dlock:") != 1 {
			t.Errorf("dlock %v: exit %d, stderr %q; want 69 and one line", args, code, errOut)
		}
	}
}

// TestFrozenRedis: a Redis that takes connections but answers nothing (a
// paused process, a frozen host) is unreachable too: exit 69 after the
// first contact's 5s, not a wait for ever.
func TestFrozenRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Pause(t)
	defer srv.Resume(t)
	env := []string{"DLOCK_REDIS=redis://" + srv.Addr()}
	for _, args := range [][]string{{"run", "job", "--", "true"}, {"status", "job"}} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // it waited for ever
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Env = append(os.Environ(), env...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		code := exitOf(cmd.Run())
		cancel()
		if code != 69 || !strings.Contains(errb.String(), "cannot reach Redis: no answer within 5s") {
			t.Errorf("dlock %v on a paused Redis: exit %d, stderr %q; want 69", args, code, errb.String())
		}
	}
}
