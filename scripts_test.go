package dlock

import (
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/go-dlock/dlock/internal/script"
)

// TestEveryHelperServesAScript checks that lua/lib holds no dead helper:
// each one is carried by at least one script (see internal/script).
func TestEveryHelperServesAScript(t *testing.T) {
	lib, err := script.NewLibrary(scriptFS)
	if err != nil {
		t.Fatal(err)
	}
	helpers := lib.Helpers()
	names, err := fs.Glob(scriptFS, "*.lua")
	if err != nil || len(names) == 0 {
		t.Fatalf("no scripts found: %v", err)
	}
	used := map[string]bool{}
	for _, name := range names {
		src, err := lib.Source(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range helpers {
			if strings.Contains(src, "local function "+h.Name+"(") {
				used[h.Name] = true
			}
		}
	}
	for _, h := range helpers {
		if !used[h.Name] {
			t.Errorf("helper %s (%s) is used by no script", h.Name, h.File)
		}
	}
}

// callArgs returns the top-level arguments of each redis.call or
// redis.pcall on line (string literals kept whole).
func callArgs(line string) [][]string {
	var calls [][]string
	for _, start := range []string{"redis.call(", "redis.pcall("} {
		for rest := line; ; {
			i := strings.Index(rest, start)
			if i < 0 {
				break
			}
			rest = rest[i+len(start):]
			var args []string
			depth, quote, arg := 0, byte(0), strings.Builder{}
		scan:
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				switch {
				case quote != 0:
					if c == quote {
						quote = 0
					}
				case c == '\'' || c == '"':
					quote = c
				case c == '(' || c == '{':
					depth++
				case c == ')' || c == '}':
					if depth == 0 {
						break scan
					}
					depth--
				case c == ',' && depth == 0:
					args = append(args, strings.TrimSpace(arg.String()))
					arg.Reset()
					continue
				}
				arg.WriteByte(c)
			}
			calls = append(calls, append(args, strings.TrimSpace(arg.String())))
		}
	}
	return calls
}

// numberLiteral is an argument written as a bare number.
var numberLiteral = regexp.MustCompile(`^-?[0-9]+$`)

// TestNoScriptHandsRedisANumberLiteral keeps number literals out of
// redis.call: Redis 7.0 prints every number argument with
// snprintf("%.17g"), which costs about what a command does. Written as a
// string ('0'), it costs nothing.
func TestNoScriptHandsRedisANumberLiteral(t *testing.T) {
	if got := callArgs(`x = {0, tonumber(redis.call('ZSCORE', k, int(n), 'a,b')) - 1, 0}`); len(got) != 1 || len(got[0]) != 4 {
		t.Fatalf("callArgs = %q; want one call of 4 arguments", got)
	}
	files, err := fs.Glob(scriptFS, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	lib, _ := fs.Glob(scriptFS, "lib/*.lua")
	for _, name := range append(files, lib...) {
		src, err := fs.ReadFile(scriptFS, name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				continue
			}
			for _, args := range callArgs(line) {
				for _, a := range args {
					if numberLiteral.MatchString(a) {
						t.Errorf("%s:%d hands redis.call the number %s: %s", name, i+1, a, strings.TrimSpace(line))
					}
				}
			}
		}
	}
}

// namedKeyScripts are the scripts sent their lock's main key alone on a
// single Redis (lock.kl), by file name prefix, with the parts
// they name the other keys from, in the order of their KEYS.
var namedKeyScripts = map[string][]string{
	"queue_":         queuedParts,
	"elect_":         queuedParts,
	"rw_rlock.lua":   rwParts,
	"rw_runlock.lua": rwParts,
}

// namedKey is how such a script reads KEYS[n], n > 1: the declared key
// (on a Cluster) or else the main key and ':' and the part, as
// keys.Lock.Part makes it.
var (
	namedKey = regexp.MustCompile(`KEYS\[(\d+)\] or (owner|KEYS\[1\]) \.\. '(:\w+)'`)
	anyKey   = regexp.MustCompile(`KEYS\[(\d+)\]`)
)

// TestScriptsNameTheKeysTheyAreNotSent checks that a script sent its
// lock's main key alone on a single Redis reads each other key as the
// declared one or the name keys.Lock.Part gives that part (a script that
// read KEYS[3] bare would find nil there; one that named ':queu' would
// keep its queue apart from the other scripts' and from a Cluster's).
func TestScriptsNameTheKeysTheyAreNotSent(t *testing.T) {
	names, err := fs.Glob(scriptFS, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range names {
		var parts []string
		for prefix, p := range namedKeyScripts {
			if strings.HasPrefix(name, prefix) {
				parts = p
			}
		}
		if parts == nil {
			continue
		}
		src, err := lua.Source(name)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		aliased := strings.Contains(src, "local owner = KEYS[1]\n")
		for i, line := range strings.Split(src, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				continue
			}
			named := 0
			for _, m := range namedKey.FindAllStringSubmatch(line, -1) {
				n, _ := strconv.Atoi(m[1]) // digits, by the pattern
				switch {
				case n < 2 || n-2 >= len(parts):
					t.Errorf("%s:%d: KEYS[%d] named, but the lock has no such key", name, i+1, n)
				case m[3] != ":"+parts[n-2]:
					t.Errorf("%s:%d: KEYS[%d] named %q, want %q", name, i+1, n, m[3], ":"+parts[n-2])
				case m[2] == "owner" && !aliased:
					t.Errorf("%s:%d: KEYS[%d] named from owner, which is not KEYS[1]", name, i+1, n)
				}
				named++
			}
			bare := 0
			for _, m := range anyKey.FindAllStringSubmatch(line, -1) {
				if m[1] != "1" {
					bare++
				}
			}
			if bare != named {
				t.Errorf("%s:%d: reads a KEYS[n], n > 1, that it is not sent on a single Redis: %s", name, i+1, strings.TrimSpace(line))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no script checked")
	}
}
