package cli

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/term"
)

// group is the command dlock runs and the processes it starts. Run from a
// script or cron (stdin not a terminal), the command gets a process group
// of its own, so that signals reach everything it started, and nothing it
// started outlives the lock. Run at a terminal, it stays in dlock's group,
// the terminal's foreground group, so that it can read the terminal: the
// terminal then delivers Ctrl-C to it directly, and dlock does not
// deliver it a second time; signals from dlock reach the command only.
type group struct {
	cmd *exec.Cmd
	own bool // the command leads a process group of its own
}

func newGroup(cmd *exec.Cmd, stdin io.Reader) *group {
	g := &group{cmd: cmd, own: !isTerminal(stdin)}
	if g.own {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	return g
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
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
