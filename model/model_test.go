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
	"slices"
	"strings"
	"testing"
	"time"
)

// What pan reports when a property fails: an assertion, as it prints
// it, or an accepting cycle of an ltl formula.
const (
	exclusion    = "lease[j]==0"      // granted: one holder whose lease runs (readers: readers only)
	fifo         = "alive[q[j]]==0"   // fifo: no live waiter ahead
	progress     = "acceptance cycle" // ltl progress: a waiter never served
	writersFirst = "!(overtaken)"     // rwmutex: a reader past a writer that asked it to wait
	capacity     = "inuse<=2"         // semaphore: the permits held fit in the size
	asked        = "mem[i]==ask[i]"   // mutexset: a member named is the member held
	order        = "age[q[j]]>0"      // mutexset, rwmutex: no live waiter past its barging window ahead
	rising       = "f>fkey"           // election: a term not above the last
	leaders      = "lead[j]==0"       // election: two leaders before their deadlines
	ownValue     = "vterm==term"      // election: a term shown with another's value
	told         = "(woken||down)"    // election: a change that wakes no follower
	expiry       = "ftimer==0"        // election: a silent end the follower sleeps past
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
func (c check) liveness() bool { return slices.Contains(c.defines, "PROGRESS") }

// Progress is checked twice for each queued primitive: two clients of two
// acquisitions each (a client that comes back barges in), and three
// clients of one (three-way interplay).
var (
	twoByTwo   = []string{"PROGRESS"}
	threeByOne = []string{"PROGRESS", "N=3", "ACQ=1"}
)

// with returns defines with more added.
func with(defines []string, more ...string) []string {
	return append(append([]string(nil), defines...), more...)
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
	{"Mutex progress, 2x2", "mutex.pml", twoByTwo, ""},
	{"Mutex progress, 3x1", "mutex.pml", threeByOne, ""},
	{"FairMutex progress, 2x2", "mutex.pml", with(twoByTwo, "FAIR"), ""},
	{"FairMutex progress, 3x1", "mutex.pml", with(threeByOne, "FAIR"), ""},
	{"Mutex progress broken: woken by messages alone", "mutex.pml", with(twoByTwo, "BROKEN_WAKEUP"), progress},

	{"RWMutex, PreferWriters", "rwmutex.pml", nil, ""},
	{"RWMutex, mixed modes", "rwmutex.pml", []string{"MIXED"}, ""},
	{"RWMutex broken: a reader that ignores intentions", "rwmutex.pml", []string{"BROKEN_GIVEWAY"}, writersFirst},
	{"RWMutex broken: a heartbeat that does not renew the intention", "rwmutex.pml", []string{"BROKEN_BEATINTENT"}, writersFirst},
	{"RWMutex broken: writer's hand-off lease counted from its message", "rwmutex.pml", []string{"BROKEN_DEADLINE"}, exclusion},
	{"RWMutex broken: writer's hand-off older than the last refusal taken", "rwmutex.pml", []string{"BROKEN_STALE"}, exclusion},
	{"RWMutex broken: writer's hand-off older than the last heartbeat's refusal", "rwmutex.pml", []string{"BROKEN_BEATSTALE"}, exclusion},
	{"RWMutex broken: a writer's try that does not count the readers", "rwmutex.pml", []string{"BROKEN_READERS"}, exclusion},
	{"RWMutex broken: a writer's release without the token check", "rwmutex.pml", []string{"BROKEN_RELEASE"}, exclusion},
	{"RWMutex broken: a newcomer writer takes a free lock past the line", "rwmutex.pml", []string{"BROKEN_BARGE"}, order},
	{"RWMutex broken: a reader's release without the share check", "rwmutex.pml", with(threeByOne, "BROKEN_RUNLOCK"), exclusion},
	{"RWMutex broken: a leaving first writer hands over a lock another writer holds", "rwmutex.pml", with(threeByOne, "BROKEN_LEAVEOWNER"), exclusion},
	{"RWMutex broken: a reader's release hands over though readers remain", "rwmutex.pml", with(threeByOne, "BROKEN_LAST"), exclusion},
	{"RWMutex broken: a writer's leave hands over past the readers", "rwmutex.pml", with(threeByOne, "BROKEN_LEAVE"), exclusion},
	{"RWMutex broken: a reader's release hands over though a lone reader holds", "rwmutex.pml", with(threeByOne, "BROKEN_LONE"), exclusion},
	{"RWMutex after a restart of Redis without persistence", "rwmutex.pml", []string{"RESTART"}, exclusion},
	{"RWMutex progress of a writer, 2x2", "rwmutex.pml", twoByTwo, ""},
	{"RWMutex progress of a writer, 3x1", "rwmutex.pml", threeByOne, ""},
	{"RWMutex progress of a reader, 3x1", "rwmutex.pml", with(threeByOne, "READER0"), ""},
	{"RWMutex progress of a writer, mixed modes, 3x1", "rwmutex.pml", with(threeByOne, "MIXED"), ""},
	{"RWMutex progress of a reader, mixed modes, 3x1", "rwmutex.pml", with(threeByOne, "MIXED", "READER0"), ""},
	{"RWMutex progress of a writer, PreferReaders, 3x1", "rwmutex.pml", with(threeByOne, "PREFER_READERS"), ""},
	{"RWMutex progress broken: a reader woken by messages alone", "rwmutex.pml", with(threeByOne, "READER0", "BROKEN_WAKEUP"), progress},

	{"Semaphore", "semaphore.pml", nil, ""},
	{"Semaphore broken: grant_waiters without the fit check", "semaphore.pml", []string{"BROKEN_FIT"}, capacity},
	{"Semaphore broken: grant_waiters past the first that does not fit", "semaphore.pml", []string{"BROKEN_SKIP"}, fifo},
	{"Semaphore broken: newcomer takes free permits past the queue", "semaphore.pml", []string{"BROKEN_BARGE"}, fifo},
	{"Semaphore broken: release without the lease check", "semaphore.pml", []string{"BROKEN_RELEASE"}, capacity},
	{"Semaphore broken: hand-off lease counted from its message", "semaphore.pml", []string{"BROKEN_DEADLINE"}, capacity},
	{"Semaphore broken: hand-off older than the last refusal taken", "semaphore.pml", []string{"BROKEN_STALE"}, capacity},
	{"Semaphore broken: hand-off older than the last heartbeat's refusal", "semaphore.pml", []string{"BROKEN_BEATSTALE"}, capacity},
	{"Semaphore after a restart of Redis without persistence", "semaphore.pml", []string{"RESTART"}, capacity},
	{"Semaphore progress, 2x2", "semaphore.pml", twoByTwo, ""},
	{"Semaphore progress, 3x1", "semaphore.pml", threeByOne, ""},
	{"Semaphore progress broken: woken by messages alone", "semaphore.pml", with(twoByTwo, "BROKEN_WAKEUP"), progress},

	{"MutexSet", "mutexset.pml", nil, ""},
	{"MutexSet broken: release without the token check", "mutexset.pml", []string{"BROKEN_RELEASE"}, exclusion},
	{"MutexSet broken: hand-over to a waiter for another member", "mutexset.pml", []string{"BROKEN_MATCH"}, asked},
	{"MutexSet broken: hand-off lease counted from its message", "mutexset.pml", []string{"BROKEN_DEADLINE"}, exclusion},
	{"MutexSet broken: hand-off older than the last refusal taken", "mutexset.pml", []string{"BROKEN_STALE"}, exclusion},
	{"MutexSet broken: hand-off older than the last heartbeat's refusal", "mutexset.pml", []string{"BROKEN_BEATSTALE"}, exclusion},
	{"MutexSet broken: try takes a member past a waiter for it", "mutexset.pml", []string{"BROKEN_BARGE"}, order},
	{"MutexSet after a restart of Redis without persistence", "mutexset.pml", []string{"RESTART"}, exclusion},
	{"MutexSet progress, 2x2", "mutexset.pml", twoByTwo, ""},
	{"MutexSet progress, 3x1", "mutexset.pml", threeByOne, ""},
	{"MutexSet progress broken: woken by messages alone", "mutexset.pml", with(twoByTwo, "BROKEN_WAKEUP"), progress},

	{"Election", "election.pml", nil, ""},
	{"Election broken: a renewal in flight not counted (the defect it found)", "election.pml", []string{"BROKEN_INFLIGHT"}, leaders},
	{"Election broken: a term issued again", "election.pml", []string{"BROKEN_FENCE"}, rising},
	{"Election broken: a renewal's deadline counted from its reply", "election.pml", []string{"BROKEN_RENEW"}, leaders},
	{"Election broken: proclaim without the token check", "election.pml", []string{"BROKEN_PROCLAIM"}, ownValue},
	{"Election broken: a hand-over heard by its waiter alone", "election.pml", []string{"BROKEN_HANDOVER"}, told},
	{"Election after a restart of Redis without persistence", "election.pml", []string{"RESTART"}, leaders},
	{"Election following", "election.pml", []string{"PROGRESS"}, ""},
	{"Election following broken: woken by messages alone", "election.pml", []string{"PROGRESS", "BROKEN_TIMER"}, progress},
	{"Election following broken: a lease brought nearer its end unannounced", "election.pml", []string{"PROGRESS", "BROKEN_SOONER"}, expiry},
	{"Election following broken: no wake-up once the hub is back", "election.pml", []string{"PROGRESS", "BROKEN_RESUB"}, progress},
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
			t.Parallel() // one pan per core (go test's -parallel)
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
