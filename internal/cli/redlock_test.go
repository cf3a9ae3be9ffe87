package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/go-dlock/dlock/internal/cli"
	"github.com/go-dlock/dlock/internal/redistest"
)

// TestRedlock: --redlock holds a mutex on a majority of independent
// masters, status reads it from them, and what Redlock cannot do is a
// usage error.
func TestRedlock(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	var urls []string
	for _, s := range srvs {
		urls = append(urls, "redis://"+s.Addr())
	}
	dlr := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		args = append([]string{"--redlock", "--redis", strings.Join(urls, ",")}, args...)
		err := cli.Run(context.Background(), args, strings.NewReader(""), &out, &errb)
		return cli.ExitCode(err), out.String(), errb.String()
	}
	// The command asks for the status of the lock it runs under.
	code, out, errOut := dlr("run", "--metadata", "rl-holder", "job", "--",
		binary, "--redlock", "--redis", strings.Join(urls, ","), "status", "--json", "job")
	if code != 0 || !strings.Contains(out, `"held": true`) || !strings.Contains(out, `"holder": "rl-holder"`) {
		t.Fatalf("status under run --redlock: exit %d, out %q, err %q", code, out, errOut)
	}
	code, _, errOut = dlr("run", "job", "--", "sh", "-c", "exit 5")
	if code != 5 {
		t.Errorf("exit status 5 came out as %d (%s)", code, errOut)
	}
	srvs[0].Kill(t)
	if code, _, errOut := dlr("run", "job", "--", "true"); code != 0 {
		t.Errorf("run with 2 of 3 masters up: exit %d, %s", code, errOut)
	}
	if code, out, errOut := dlr("status", "--json", "job"); code != 0 || !strings.Contains(out, `"held": false`) {
		t.Errorf("status --redlock: exit %d, out %q, err %q", code, out, errOut)
	}
	for _, args := range [][]string{
		{"run", "--fair", "job", "--", "true"},
		{"run", "-s", "job", "--", "true"},
		{"run", "-x", "job", "--", "true"},
		{"set", "add", "pool", "a"},
		{"--cluster", "status", "job"},
	} {
		if code, _, errOut := dlr(args...); code != 2 || !strings.HasPrefix(errOut, "dlock: ") {
			t.Errorf("%q with --redlock: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
}

// TestRedlockSameMasterTwice: one URL given twice would count one server
// as two masters, a majority of fewer servers than it claims.
func TestRedlockSameMasterTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := "redis://" + srv.Addr()
	for _, list := range []string{a + "," + a + ",redis://127.0.0.1:1", a + "," + a + "/1,redis://127.0.0.1:1"} {
		var out, errb bytes.Buffer
		err := cli.Run(context.Background(), []string{"--redlock", "--redis", list, "run", "job", "--", "echo", "ran"},
			strings.NewReader(""), &out, &errb)
		if code := cli.ExitCode(err); code != 2 || out.Len() > 0 {
			t.Errorf("--redlock --redis %s: exit %d, stdout %q, stderr %q; want 2 (usage), the command not run", list, code, out.String(), errb.String())
		}
	}
}
