package dlock

import (
	"io/fs"
	"regexp"
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
