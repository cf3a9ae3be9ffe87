package redistest

import (
	"context"
	"iter"
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
	var total int64
	for name, stats := range info(t, rdb, "commandstats") {
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
	var total float64
	for name, v := range info(t, rdb, "cpu") {
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

// info yields the fields of rdb's INFO section, each name and value.
func info(t testing.TB, rdb *redis.Client, section string) iter.Seq2[string, string] {
	t.Helper()
	text, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	return func(yield func(string, string) bool) {
		for line := range strings.Lines(text) {
			name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && !yield(name, value) {
				return
			}
		}
	}
}
