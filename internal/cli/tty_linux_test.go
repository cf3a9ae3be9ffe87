package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/go-dlock/dlock/internal/redistest"
)

// openPTY opens a new pseudo-terminal and returns its two ends, closed
// with t.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("a pseudo-terminal for the test: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var n uint32
	var unlock int32
	for _, c := range []struct {
		req uintptr
		arg unsafe.Pointer
	}{{syscall.TIOCGPTN, unsafe.Pointer(&n)}, {syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)}} {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), c.req, uintptr(c.arg)); e != 0 {
			t.Fatalf("a pseudo-terminal for the test: ioctl: %v", e)
		}
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("a pseudo-terminal for the test: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// A dlock run in a terminal's session with stdin a pipe (echo … | dlock
// run …) keeps the command in the terminal's foreground group, so that it
// may read the terminal: in a group of its own it would be a background
// job, stopped by the terminal as it reads, with dlock holding the lock
// for it for ever.
func TestCommandMayReadTheTerminal(t *testing.T) {
	srv := redistest.Start(t)
	master, tty := openPTY(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(binary, "run", "tty", "--", "sh", "-c", "echo $$ > "+pidFile+"; read x </dev/tty; test \"$x\" = yes")
	cmd.Env = append(os.Environ(), "DLOCK_REDIS=redis://"+srv.Addr())
	cmd.Stdin = strings.NewReader("") // a pipe
	cmd.Stdout, cmd.Stderr = tty, tty
	// dlock leads a session whose controlling terminal is tty (its fd 1).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 1}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := pidOf(t, pidFile)
	defer syscall.Kill(child, syscall.SIGKILL)
	time.Sleep(300 * time.Millisecond) // it reads the terminal by now
	if f := procStat(child); len(f) > 0 && f[0] == "T" {
		t.Fatal("the command was stopped by the terminal it read")
	}
	if _, err := master.Write([]byte("yes\n")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitOf(err); code != 0 {
			t.Errorf("dlock exited %d; want 0, the command having read the terminal's line", code)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("dlock still runs 10s after the command's line was typed")
	}
}
