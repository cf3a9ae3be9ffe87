package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/cli"
	"github.com/go-dlock/dlock/internal/redistest"
)

func pidOf(t *testing.T, pidFile string) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		b, err := os.ReadFile(pidFile)
		if err == nil && len(bytes.TrimSpace(b)) > 0 {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no pid")
	return 0
}

// procStat reads pid's /proc stat line and returns its fields after the
// command name (which is in parentheses, and may hold spaces): the state
// first, then the parent's pid and so on; nil when pid is gone.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

// alive reports whether pid runs: exists and is not a zombie (a killed
// orphan may wait a while to be reaped by init).
func alive(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] != "Z"
}

// A lost lease stops the command and what it started: nothing keeps
// running in the critical section after dlock exited 75. Also when
// dlock's stderr is a pipe nobody reads any more (a "| logger" that
// died): writing that the lease was lost does not kill dlock with SIGPIPE
// before it has stopped them.
func TestLostLeaseStopsGrandchildren(t *testing.T) {
	for _, deadStderr := range []bool{false, true} {
		t.Run(fmt.Sprintf("dead stderr %v", deadStderr), func(t *testing.T) {
			srv := redistest.Start(t)
			pidFile := filepath.Join(t.TempDir(), "pid")
			cmd := spawn(t, srv, "run", "--ttl", "1s", "--kill-after", "200ms", "grand", "--",
				"sh", "-c", "sleep 30 & echo $! > "+pidFile+"; wait")
			if deadStderr {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				r.Close()
				defer w.Close()
				cmd.Stderr = w
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitHeld(t, srv, "grand")
			gc := pidOf(t, pidFile)
			defer syscall.Kill(gc, syscall.SIGKILL)
			if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); exitOf(err) != cli.ExitLost {
				t.Errorf("dlock ended with %v after the lease was lost; want exit %d", err, cli.ExitLost)
			}
			time.Sleep(100 * time.Millisecond)
			if alive(gc) {
				t.Errorf("grandchild %d still runs after the lease was lost and dlock exited", gc)
			}
		})
	}
}

// SIGTERM to dlock reaches the command's whole group, and the lock is
// released only when none of it runs any more.
func TestTermStopsGrandchildrenBeforeRelease(t *testing.T) {
	srv := redistest.Start(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := spawn(t, srv, "run", "term", "--", "sh", "-c", "sleep 30 & echo $! > "+pidFile+"; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, "term")
	gc := pidOf(t, pidFile)
	defer syscall.Kill(gc, syscall.SIGKILL)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if code, _, _ := dl(t, srv, "run", "-n", "term", "--", "true"); code == 0 && alive(gc) {
		t.Errorf("dlock exited %d and the lock was taken again while its command's child %d still runs", exitOf(err), gc)
	}
}

// Ctrl-C at a terminal signals the whole foreground process group; the
// command must get it once, not also forwarded by dlock.
func TestOneSIGINTPerInterrupt(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	script := `import signal,sys,time
n=[0]
def h(s,f):
    n[0]+=1
    open(sys.argv[1],'a').write('INT\n')
signal.signal(signal.SIGINT,h)
open(sys.argv[1]+'.ready','w').write('x')
t=time.time()
while time.time()-t<1.5: time.sleep(0.01)
`
	cmd := spawn(t, srv, "run", "ctrlc", "--", "python3", "-c", script, count)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(count + ".ready"); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) // what the tty driver does
	cmd.Wait()
	b, _ := os.ReadFile(count)
	if n := strings.Count(string(b), "INT"); n != 1 {
		t.Errorf("command got %d SIGINTs for one Ctrl-C", n)
	}
}

// The status table counts a Mutex's queued waiters.
func TestStatusTableMutexWaiters(t *testing.T) {
	srv, c := library(t)
	ctx := context.Background()
	l, err := c.Mutex("q").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.Mutex("q").Lock(wctx)
	time.Sleep(300 * time.Millisecond)
	_, out, _ := dl(t, srv, "status", "q")
	_, js, _ := dl(t, srv, "status", "--json", "q")
	t.Logf("table:\n%s\njson:\n%s", out, js)
	if !strings.Contains(out, "1 queued") {
		t.Errorf("status table does not show the mutex's waiter")
	}
}

func TestStatusTableRWWriters(t *testing.T) {
	srv, c := library(t)
	ctx := context.Background()
	r, err := c.RWMutex("rw").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unlock(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.RWMutex("rw").Lock(wctx)
	time.Sleep(300 * time.Millisecond)
	_, out, _ := dl(t, srv, "status", "rw")
	t.Logf("table:\n%s", out)
	if !strings.Contains(out, "1 readers, 1 writers queued, new readers wait") {
		t.Errorf("status table does not show the reader, the queued writer and its intention")
	}
}

func TestStatusTableSetWaiters(t *testing.T) {
	srv, c := library(t)
	ctx := context.Background()
	s := c.MutexSet("pool")
	if err := s.Add(ctx, "only"); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.MutexSet("pool").AcquireMember(wctx, "only")
	time.Sleep(300 * time.Millisecond)
	_, out, _ := dl(t, srv, "status", "pool")
	_, js, _ := dl(t, srv, "status", "--json", "pool")
	t.Logf("table:\n%s\njson:\n%s", out, js)
	if !strings.Contains(out, "0/1 free, 1 queued") {
		t.Errorf("status table does not show the set's waiter")
	}
	if !strings.Contains(js, `"member": "only"`) {
		t.Errorf("status JSON does not say which member the waiter waits for")
	}
}

// waitGone waits up to 5s for pid to stop running.
func waitGone(t *testing.T, pid int, why string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !alive(pid) {
			return
		}
	}
	t.Errorf("process %d still runs 5s after %s", pid, why)
}

// A dlock killed outright (SIGKILL, the OOM killer) can neither stop its
// command nor renew the lock: the command dies with it, rather than run
// on into the time the lock may be someone else's.
func TestKilledDlockTakesItsCommand(t *testing.T) {
	srv := redistest.Start(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := spawn(t, srv, "run", "killed", "--", "sh", "-c", "echo $$ > "+pidFile+"; exec sleep 30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, "killed")
	child := pidOf(t, pidFile)
	defer syscall.Kill(child, syscall.SIGKILL)
	cmd.Process.Kill()
	cmd.Wait()
	waitGone(t, child, "dlock was killed")
}

// cpuTicks is the CPU time pid has used, user and system, in clock ticks
// (a hundredth of a second on Linux).
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	f := procStat(pid)
	if len(f) < 13 {
		t.Fatalf("no CPU times for process %d", pid)
	}
	// utime and stime are the 12th and 13th fields after the command name.
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return ut + st
}

// After a lost lease, a command that ignores SIGTERM is given
// --kill-after before SIGKILL: dlock waits it out asleep, not spinning on
// the lost lease.
func TestLostLeaseWaitsAsleep(t *testing.T) {
	srv := redistest.Start(t)
	cmd := spawn(t, srv, "run", "--ttl", "1s", "--kill-after", "3s", "asleep", "--",
		"sh", "-c", `trap "" TERM; while :; do sleep 0.2; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, "asleep")
	srv.Client(t).FlushAll(context.Background())
	time.Sleep(time.Second) // a renewal, due every TTL/3 at most, finds the lease gone
	before := cpuTicks(t, cmd.Process.Pid)
	time.Sleep(1500 * time.Millisecond)
	if used := cpuTicks(t, cmd.Process.Pid) - before; used > 40 {
		t.Errorf("dlock used %d ticks of CPU in 1.5s while waiting to kill its command; want it asleep", used)
	}
	if code := exitOf(cmd.Wait()); code != 75 {
		t.Errorf("dlock exited %d; want 75, the lease lost", code)
	}
}

// TestIgnoredSignalsStayIgnored: under nohup (SIGHUP ignored), or started in the background by a
// non-interactive shell (SIGINT ignored), flock(1) leaves those signals
// ignored for its command. dlock must too: it must neither un-ignore them
// for the command nor pass on to it a signal it was started ignoring.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	pidFile, done, mask := filepath.Join(dir, "pid"), filepath.Join(dir, "done"), filepath.Join(dir, "mask")
	script := `grep SigIgn /proc/self/status > ` + mask + `; echo $$ > ` + pidFile + `; sleep 1; echo ok > ` + done
	// What nohup does for SIGHUP, and sh for a background job's SIGINT.
	cmd := exec.Command("sh", "-c", `trap "" HUP INT; exec "$0" "$@"`, binary, "run", "nohup-job", "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "DLOCK_REDIS=redis://"+srv.Addr())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := pidOf(t, pidFile)
	defer syscall.Kill(child, syscall.SIGKILL)
	b, _ := os.ReadFile(mask)
	fields := strings.Fields(string(b))
	if len(fields) == 2 {
		m, _ := strconv.ParseUint(fields[1], 16, 64)
		if m&1 == 0 || m&2 == 0 {
			t.Errorf("the command's ignored signals are %s; want SIGHUP and SIGINT still ignored, as dlock was started", fields[1])
		}
	}
	// The terminal hangs up (nohup's case), or someone sends dlock SIGINT.
	cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(50 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if code := exitOf(err); code != 0 {
		t.Errorf("dlock exited %d; want 0: signals it was started ignoring must not end the command", code)
	}
	if _, err := os.Stat(done); err != nil {
		t.Errorf("the command did not finish: %v", err)
	}
}
