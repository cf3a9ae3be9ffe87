package redistest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// StartCounted starts a redis-server under valgrind's callgrind, which
// counts the instructions the server runs (see Instructions): a measure of
// what operations cost Redis that, unlike time, does not move with the
// load of a shared machine. It runs some fifty times slower, so it is for
// benchmarks. A missing valgrind fails t.
func StartCounted(t testing.TB) *Server {
	t.Helper()
	bin := mustBinary(t, "DLOCK_REDIS_SERVER", "redis-server", "redis-server")
	vg := mustBinary(t, "DLOCK_VALGRIND", "valgrind", "valgrind")
	mustBinary(t, "DLOCK_CALLGRIND_CONTROL", "callgrind_control", "valgrind")
	s := newServer(t, bin, nil)
	s.wrap = []string{vg, "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(s.dir, "callgrind.%p")}
	if err := startAll([]*Server{s}); err != nil {
		t.Fatal(err)
	}
	return s
}

// StartBench starts the Redis of a benchmark: counted (StartCounted) when
// $DLOCK_BENCH_CALLGRIND is set, so that the benchmark can report what its
// operations cost Redis in instructions (see Counted), else a plain one.
func StartBench(t testing.TB) *Server {
	t.Helper()
	if os.Getenv("DLOCK_BENCH_CALLGRIND") != "" {
		return StartCounted(t)
	}
	return Start(t)
}

// Counted reports whether s runs under callgrind (see StartCounted).
func (s *Server) Counted() bool { return len(s.wrap) > 0 }

// Instructions returns the instructions a server of StartCounted has run
// since the last call, or since it started: callgrind writes its counts
// out and starts them again from zero.
func (s *Server) Instructions(t testing.TB) int64 {
	t.Helper()
	ctl := mustBinary(t, "DLOCK_CALLGRIND_CONTROL", "callgrind_control", "valgrind")
	s.mu.Lock()
	running := s.runningLocked() && s.Counted()
	pid := 0
	if running {
		pid = s.cmd.Process.Pid
	}
	s.mu.Unlock()
	if !running {
		t.Fatal("redistest: Instructions of a server not running under StartCounted")
	}
	before, _ := filepath.Glob(filepath.Join(s.dir, "callgrind.*"))
	if out, err := exec.Command(ctl, "--dump", strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Fatalf("redistest: callgrind_control: %v: %s", err, out)
	}
	after, _ := filepath.Glob(filepath.Join(s.dir, "callgrind.*"))
	var dumps []string
	for _, f := range after {
		if !slices.Contains(before, f) {
			dumps = append(dumps, f)
		}
	}
	if len(dumps) != 1 {
		t.Fatalf("redistest: callgrind wrote %d new files, want 1", len(dumps))
	}
	n, err := totalInstructions(dumps[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// totalInstructions reads the event total of a callgrind dump.
func totalInstructions(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("redistest: no summary line in %s", path)
}
