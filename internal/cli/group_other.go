//go:build !linux

package cli

import "syscall"

// dieWithParent does nothing where the system cannot tie a child's life
// to its parent's: a command whose dlock is killed runs on.
func dieWithParent(*syscall.SysProcAttr) {}
