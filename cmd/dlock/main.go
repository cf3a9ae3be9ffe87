// Command dlock is flock(1) for many machines: it runs a command while
// holding a distributed lock on Redis. See `dlock help`.
package main

import (
	"context"
	"os"

	"github.com/go-dlock/dlock/internal/cli"
)

func main() {
	err := cli.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	os.Exit(cli.ExitCode(err))
}
