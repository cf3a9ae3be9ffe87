package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// alive reports whether pid runs: exists and is not a zombie (a killed
// orphan may wait a while to be reaped by init).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// A lost lease stops the command and what it started: nothing keeps
// running in the critical section after dlock exited 75.
func TestLostLeaseStopsGrandchildren(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := spawn(t, srv, "run", "--ttl", "1s", "--kill-after", "200ms", "grand", "--",
		"sh", "-c", "sleep 30 & echo $! > "+pidFile+"; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, srv, "grand")
	gc := pidOf(t, pidFile)
	defer syscall.Kill(gc, syscall.SIGKILL)
	rdb.FlushAll(context.Background())
	err := cmd.Wait()
	t.Logf("dlock exit %d", exitOf(err))
	time.Sleep(100 * time.Millisecond)
	if alive(gc) {
		t.Errorf("grandchild %d still runs after the lease was lost and dlock exited", gc)
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
