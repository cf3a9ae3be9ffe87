package cli

import "syscall"

// dieWithParent has the command killed when dlock dies (SIGKILL, the OOM
// killer) without stopping it first: its renewals end with dlock, so it
// must not run on into the time the lock may be someone else's. Only the
// command is killed; what it started in its own group is left, with
// nobody to stop it.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
