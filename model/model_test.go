// Package model checks the Promela models of dlock's protocols with spin:
// each model must hold, and each broken variant of it must be rejected,
// so that a model that proves nothing cannot pass (docs/model.md).
package model

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// What pan reports when a property fails: an assertion, as it prints
// it, or an accepting cycle of an ltl formula.
const (
	exclusion = "lease[j]==0"      // granted: one holder whose lease runs
	fifo      = "alive[q[j]]==0"   // fifo: no live waiter ahead
	progress  = "acceptance cycle" // ltl progress: a waiter never served
)

// A check is one run of spin on a model.
type check struct {
	name    string
	model   string   // a file in this directory
	defines []string // passed to spin as -D; PROGRESS checks the ltl formula
	// violated is empty when the model must hold, else what the checker
	// must find violated.
	violated string
}

// liveness reports whether c checks the model's ltl formula (its
// assertions too), under weak fairness, rather than its assertions alone.
func (c check) liveness() bool {
	for _, d := range c.defines {
		if d == "PROGRESS" {
			return true
		}
	}
	return false
}

var checks = []check{
	{"Mutex", "mutex.pml", nil, ""},
	{"FairMutex", "mutex.pml", []string{"FAIR"}, ""},
	{"Mutex broken: release without the token check", "mutex.pml", []string{"BROKEN_RELEASE"}, exclusion},
	{"Mutex broken: hand-off lease counted from its message", "mutex.pml", []string{"BROKEN_DEADLINE"}, exclusion},
	{"Mutex broken: hand-off older than the last refusal taken", "mutex.pml", []string{"BROKEN_STALE"}, exclusion},
	{"Mutex broken: hand-off older than the last heartbeat's refusal", "mutex.pml", []string{"BROKEN_BEATSTALE"}, exclusion},
	{"FairMutex broken: newcomer takes a free lock past the queue", "mutex.pml", []string{"FAIR", "BROKEN_BARGE"}, fifo},
	{"Mutex after a restart of Redis without persistence", "mutex.pml", []string{"RESTART"}, exclusion},
	{"Mutex progress", "mutex.pml", []string{"PROGRESS", "N=3"}, ""},
	{"FairMutex progress", "mutex.pml", []string{"PROGRESS", "N=3", "FAIR"}, ""},
	{"Mutex progress broken: woken by messages alone", "mutex.pml", []string{"PROGRESS", "BROKEN_WAKEUP"}, progress},
}

// TestModels runs every check: spin generates the verifier, gcc builds
// it, and it searches the whole state space (exhaustively: pan's
// -DCOLLAPSE only compresses the states it stores). A failure prints the
// counterexample's last steps.
func TestModels(t *testing.T) {
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the models need spin and gcc (apt-get install spin gcc; ./scripts/test installs them)", tool)
		}
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			r := verify(t, c)
			t.Logf("%s states stored, depth %s, %s", r.states, r.depth, r.took.Round(time.Second/10))
			switch {
			case c.violated == "" && r.errors != 0:
				t.Fatalf("the model fails: %s\n%s", r.violation, trail(c, r.dir))
			case c.violated == "" && r.incomplete:
				t.Fatalf("the search did not complete:\n%s", r.out)
			case c.violated != "" && r.errors == 0:
				t.Fatalf("the checker accepted a broken model (want %q violated)", c.violated)
			case c.violated != "" && !strings.Contains(r.violation, c.violated):
				t.Fatalf("the broken model fails, but not as it should: %s (want %q violated)", r.violation, c.violated)
			}
		})
	}
}

// A result is what pan reported.
type result struct {
	dir        string // where pan ran, and left its trail
	out        string
	errors     int
	violation  string // the first assertion violated
	states     string
	depth      string
	incomplete bool
	took       time.Duration
}

var (
	errorsRe    = regexp.MustCompile(`errors: (\d+)`)
	violationRe = regexp.MustCompile(`assertion violated (.*?) \(at depth`)
	statesRe    = regexp.MustCompile(`(\S+) states, stored`)
	depthRe     = regexp.MustCompile(`depth reached (\d+)`)
)

// verify runs spin, gcc and pan on c in a directory of its own (pan
// writes its trail beside the model).
func verify(t *testing.T, c check) result {
	t.Helper()
	dir := t.TempDir()
	copyModels(t, dir)
	run(t, dir, "spin", append(spinDefines(c), "-a", c.model)...)
	gcc, args := []string{"-O2", "-w", "-DCOLLAPSE", "-o", "pan", "pan.c"}, []string{"-m1000000"}
	if c.liveness() {
		args = append(args, "-a", "-f") // accepting cycles, weak fairness
	} else {
		gcc = append(gcc, "-DSAFETY")
	}
	run(t, dir, "gcc", gcc...)
	start := time.Now()
	// pan's exit status says nothing of what it found: its report does.
	pan := exec.Command("./pan", args...)
	pan.Dir = dir
	b, _ := pan.CombinedOutput()
	out := string(b)
	r := result{dir: dir, out: out, took: time.Since(start), incomplete: strings.Contains(out, "search depth too small")}
	if m := errorsRe.FindStringSubmatch(out); m != nil {
		fmt.Sscan(m[1], &r.errors)
	} else {
		t.Fatalf("pan printed no error count:\n%s", out)
	}
	if m := violationRe.FindStringSubmatch(out); m != nil {
		r.violation = m[1]
	} else if strings.Contains(out, progress) {
		r.violation = progress
	}
	if m := statesRe.FindStringSubmatch(out); m != nil {
		r.states = m[1]
	}
	if m := depthRe.FindStringSubmatch(out); m != nil {
		r.depth = m[1]
	}
	return r
}

// copyModels copies the models, and what they include, into dir.
func copyModels(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob("*.pml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no models here (%v)", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// trail replays the counterexample pan left in dir for c, for a
// failure's message: its last steps and the state they led to.
func trail(c check, dir string) string {
	cmd := exec.Command("spin", append(spinDefines(c), "-t", "-p", "-g", c.model)...)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	lines := strings.Split(string(out), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	return strings.Join(lines, "\n")
}

// spinDefines returns c's defines as spin's -D flags.
func spinDefines(c check) []string {
	var args []string
	for _, d := range c.defines {
		args = append(args, "-D"+d)
	}
	return args
}

// run runs name with args in dir and returns its output, failing the
// test if it cannot run or exits non-zero.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}
