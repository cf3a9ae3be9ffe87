package cli

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// group is the command dlock runs and the processes it starts. Where
// dlock has no controlling terminal (cron, systemd, ssh without -t), the
// command gets a process group of its own, so that signals reach
// everything it started, and nothing it started outlives the lock. In a
// terminal's session it stays in dlock's group: in a group of its own it
// would be a background job of that terminal, which stops it when it
// reads the terminal (a prompt on /dev/tty, even with stdin a pipe),
// leaving dlock holding the lock for it for ever. There the terminal
// delivers Ctrl-C to the command directly, and dlock does not deliver it
// a second time; signals from dlock reach the command only. Either way the
// command is killed if dlock dies without stopping it (see dieWithParent).
type group struct {
	cmd *exec.Cmd
	own bool // the command leads a process group of its own
}

func newGroup(cmd *exec.Cmd) *group {
	g := &group{cmd: cmd, own: !hasTerminal()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: g.own}
	dieWithParent(cmd.SysProcAttr)
	return g
}

// hasTerminal reports whether dlock has a controlling terminal.
func hasTerminal() bool {
	f, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// start starts the command and returns a channel that receives its Wait's
// result. The signal the command gets when its parent dies (see
// dieWithParent) comes when the thread that started it ends, not the
// process: it is started on a thread kept for it until it exits.
func (g *group) start() (<-chan error, error) {
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		// Unlocked only once the command has exited: a goroutine that ends
		// locked ends its thread, which would kill every other child started
		// from that thread with a parent-death signal (a test's
		// redis-server, when dlock runs in the test's process).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := g.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- g.cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// signal sends sig to the command's group, or to the command alone.
func (g *group) signal(sig syscall.Signal) {
	if g.own {
		_ = syscall.Kill(-g.cmd.Process.Pid, sig)
		return
	}
	_ = g.cmd.Process.Signal(sig)
}

// forward passes on a signal dlock received, and reports whether it did:
// at a terminal, SIGINT came to the command from the terminal already.
func (g *group) forward(sig syscall.Signal) bool {
	if !g.own && sig == syscall.SIGINT {
		return false
	}
	g.signal(sig)
	return true
}

// stopRest ends what is left of the group once the command has exited:
// SIGTERM, then SIGKILL after grace.
func (g *group) stopRest(grace time.Duration) {
	if !g.own {
		return
	}
	pgid := g.cmd.Process.Pid
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // nobody left
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
