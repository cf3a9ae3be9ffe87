//go:build linux

package redistest

import "syscall"

// sysProcAttr puts redis in its own process group, so one signal also
// reaches any child it forks. Pdeathsig kills redis if the test binary dies
// without running its cleanups (e.g. a -timeout panic), so no orphan keeps
// holding a port. (The signal fires when the spawning OS thread exits, which
// the Go runtime only does when a goroutine exits while locked to it.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
