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
