// Package script loads dlock's embedded Lua scripts.
//
// A script is a .lua file that opens with a header naming its KEYS, ARGV
// and what it returns; Load refuses one that does not. Helpers that
// scripts share live in lib/*.lua, one file per family (clock and fences,
// owner hashes, waiter queues, read shares, mutex sets), each a series of
// `local function` definitions with their comments. Load gives a script
// exactly the helpers it calls (or passes to pcall), directly or through
// other helpers, each defined before its first use: a script carries only
// what it uses, and a helper is written once.
//
// Defining a helper costs Redis time on every call (Lua makes a closure
// each time the definition runs), so a script whose common path returns
// early may mark where its other paths begin with a line that reads
// exactly
//
//	-- @helpers
//
// The helpers that only the code below such a line needs are defined
// there instead of at the top, and a call that returns above it never
// makes them. The line must stand at the script's top level, outside any
// block, since Lua scopes a local function to its block.
//
// Scripts run with go-redis' Script.Run: EVALSHA, falling back to EVAL when
// the server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
package script

import (
	"fmt"
	"io/fs"
	"strings"

	"github.com/redis/go-redis/v9"
)

// LibGlob matches the helper files, relative to the scripts' FS.
const LibGlob = "lib/*.lua"

// Library is the scripts of an FS and the helpers they share, read once.
type Library struct {
	fsys    fs.FS
	helpers []Helper
}

// Helper is one shared function of lib/*.lua.
type Helper struct {
	Name  string
	File  string
	Src   string          // its comment and definition
	calls map[string]bool // the functions it calls
}

// NewLibrary reads the helpers of fsys. It fails when a helper file holds
// anything but functions, or two define the same one.
func NewLibrary(fsys fs.FS) (*Library, error) {
	files, err := fs.Glob(fsys, LibGlob)
	if err != nil {
		return nil, err
	}
	l := &Library{fsys: fsys}
	seen := map[string]string{}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		hs, err := parseLib(f, string(b))
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			if prev, ok := seen[h.Name]; ok {
				return nil, fmt.Errorf("script %s: helper %s is defined in %s too", f, h.Name, prev)
			}
			seen[h.Name] = f
		}
		l.helpers = append(l.helpers, hs...)
	}
	return l, nil
}

// MustLibrary is NewLibrary for package initialisation: the scripts are
// part of the binary, so a failure is a build defect.
func MustLibrary(fsys fs.FS) *Library {
	l, err := NewLibrary(fsys)
	if err != nil {
		panic(err)
	}
	return l
}

// Helpers returns every helper, in file and then definition order.
func (l *Library) Helpers() []Helper { return l.helpers }

// Load returns the script name with the helpers it uses. It fails when the
// file is missing or its header lacks KEYS, ARGV or Returns.
func (l *Library) Load(name string) (*redis.Script, error) {
	src, err := l.Source(name)
	if err != nil {
		return nil, err
	}
	return redis.NewScript(src), nil
}

// MustLoad is Load for package initialisation.
func (l *Library) MustLoad(name string) *redis.Script {
	s, err := l.Load(name)
	if err != nil {
		panic(err)
	}
	return s
}

// Source returns the text Load sends to Redis for the script name: the
// helpers its first part uses, each after the helpers it calls, then that
// part; then, for each part after a HelpersMark line, the helpers it
// needs that are not defined yet, then the part.
func (l *Library) Source(name string) (string, error) {
	src, err := read(l.fsys, name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	done := map[string]bool{}
	var define func(calls map[string]bool)
	define = func(calls map[string]bool) {
		for _, h := range l.helpers {
			if calls[h.Name] && !done[h.Name] {
				done[h.Name] = true
				define(h.calls)
				b.WriteString(h.Src)
				b.WriteString("\n")
			}
		}
	}
	for _, part := range parts(src) {
		define(called(part))
		b.WriteString(part)
	}
	return b.String(), nil
}

// HelpersMark is the line after which a script's helpers not needed
// above it are defined (see the package comment).
const HelpersMark = "-- @helpers"

// parts splits a script at its HelpersMark lines, which are dropped.
func parts(src string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(src) {
		if strings.TrimRight(line, "\r\n") == HelpersMark {
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return append(out, cur.String())
}

// Load reads the helpers of fsys and returns the script name with those it
// uses; see Library.Load.
func Load(fsys fs.FS, name string) (*redis.Script, error) {
	l, err := NewLibrary(fsys)
	if err != nil {
		return nil, err
	}
	return l.Load(name)
}

// Source is Library.Source on the helpers of fsys.
func Source(fsys fs.FS, name string) (string, error) {
	l, err := NewLibrary(fsys)
	if err != nil {
		return "", err
	}
	return l.Source(name)
}

// parseLib splits a helper file into its functions: each runs from the
// comment lines just above its `local function` line to its `end` line.
// Blank lines and comments between functions are the file's own.
func parseLib(file, src string) ([]Helper, error) {
	var out []Helper
	var doc, body strings.Builder
	var cur *Helper
	for line := range strings.Lines(src) {
		text := strings.TrimRight(line, "\r\n")
		switch {
		case cur != nil:
			body.WriteString(line)
			if text == "end" {
				cur.Src = strings.TrimRight(body.String(), "\n")
				cur.calls = called(cur.Src)
				delete(cur.calls, cur.Name)
				out = append(out, *cur)
				cur = nil
			}
		case strings.HasPrefix(text, "--"):
			doc.WriteString(line)
		case text == "":
			doc.Reset()
		case strings.HasPrefix(text, "local function "):
			name, _, ok := strings.Cut(strings.TrimPrefix(text, "local function "), "(")
			if !ok {
				return nil, fmt.Errorf("script %s: cannot read the function name in %q", file, text)
			}
			cur = &Helper{Name: strings.TrimSpace(name), File: file}
			body.Reset()
			body.WriteString(doc.String())
			body.WriteString(line)
			doc.Reset()
		default:
			return nil, fmt.Errorf("script %s: only local functions may stand at the top level of a helper file, not %q", file, text)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("script %s: function %s has no `end` line at the start of a line", file, cur.Name)
	}
	return out, nil
}

// called returns the names Lua code calls, comments and string literals
// aside: every name followed by "(" that is not a field or method (a.b(),
// a:b()), and a function passed to pcall (pcall(f, ...)). Only calls
// count, not every name, so that a local variable named like a helper
// neither pulls it in nor orders the helpers wrongly.
func called(code string) map[string]bool {
	names := map[string]bool{}
	for line := range strings.Lines(code) {
		pcalled := false // the next name is pcall's function
		for i := 0; i < len(line); {
			switch c := line[i]; {
			case c == '-' && strings.HasPrefix(line[i:], "--"):
				i = len(line)
			case c == '\'' || c == '"':
				i, pcalled = endOfString(line, i), false
			case isNameStart(c):
				j := i
				for j < len(line) && (isNameStart(line[j]) || line[j] >= '0' && line[j] <= '9') {
					j++
				}
				k := j
				for k < len(line) && line[k] == ' ' {
					k++
				}
				field := i > 0 && (line[i-1] == '.' || line[i-1] == ':')
				call := k < len(line) && line[k] == '(' && !field
				if call || pcalled {
					names[line[i:j]] = true
				}
				pcalled = call && line[i:j] == "pcall"
				i = j
			default:
				if c != ' ' && c != '(' {
					pcalled = false
				}
				i++
			}
		}
	}
	return names
}

// endOfString returns the index just past the quoted string that starts at
// line[i], or the line's end.
func endOfString(line string, i int) int {
	for j := i + 1; j < len(line); j++ {
		switch line[j] {
		case '\\':
			j++
		case line[i]:
			return j + 1
		}
	}
	return len(line)
}

func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func read(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", fmt.Errorf("script %s: %w", name, err)
	}
	src := string(b)
	header := headerOf(src)
	for _, word := range []string{"KEYS", "ARGV", "Returns"} {
		if !strings.Contains(header, word) {
			return "", fmt.Errorf("script %s: header comment does not describe %s", name, word)
		}
	}
	return src, nil
}

// headerOf returns the leading comment lines of a script.
func headerOf(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if !strings.HasPrefix(line, "--") {
			break
		}
		b.WriteString(line)
	}
	return b.String()
}
