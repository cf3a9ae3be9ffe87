//go:build unix && !linux

package redistest

import "syscall"

// sysProcAttr puts redis in its own process group, so one signal also
// reaches any child it forks.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
