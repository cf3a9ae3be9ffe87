package redistest

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandMicros returns the microseconds rdb's server has spent running
// the commands named (lower case: "evalsha", "set"), from INFO
// commandstats. The commands a script runs count inside its script's time
// (and again under their own names).
func CommandMicros(t testing.TB, rdb *redis.Client, names ...string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for line := range strings.Lines(info) {
		name, stats, _ := strings.Cut(strings.TrimSpace(line), ":")
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok || !slices.Contains(names, cmd) {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("commandstats %s: %v", name, err)
				}
				total += n
			}
		}
	}
	return total
}

// CPUMicros returns the CPU time rdb's server process has used, user and
// system together, in microseconds, from INFO cpu. Unlike a command's time
// in commandstats (wall time from its start to its end), it does not count
// the time the server waited for a CPU while another process ran: on a
// machine with fewer cores than busy processes, that wait lands in
// whichever command was running, the longer ones most.
func CPUMicros(t testing.TB, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for line := range strings.Lines(info) {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name != "used_cpu_sys" && name != "used_cpu_user" {
			continue
		}
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("INFO cpu %s: %v", name, err)
		}
		total += secs
	}
	return int64(total * 1e6)
}
