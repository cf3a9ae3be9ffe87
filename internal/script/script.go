// Package script loads dlock's embedded Lua scripts.
//
// A script is a .lua file that opens with a header naming its KEYS, ARGV
// and what it returns; Load refuses one that does not. Helpers that
// scripts share live in lib/*.lua, one file per family (clock and fences,
// owner hashes, waiter queues, read shares, mutex sets), each a series of
// `local function` definitions with their comments. Load gives a script
// exactly the helpers it calls, directly or through other helpers, each
// defined before its first use: a script carries only what it uses, and a
// helper is written once.
//
// Scripts run with go-redis' Script.Run: EVALSHA, falling back to EVAL when
// the server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
package script

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// LibGlob matches the helper files, relative to the scripts' FS.
const LibGlob = "lib/*.lua"

// Load returns the script name of fsys with the helpers it uses. It fails
// when the file is missing, its header lacks KEYS, ARGV or Returns, or a
// helper file holds anything but functions.
func Load(fsys fs.FS, name string) (*redis.Script, error) {
	src, err := Source(fsys, name)
	if err != nil {
		return nil, err
	}
	return redis.NewScript(src), nil
}

// MustLoad is Load for package initialisation: the scripts are part of the
// binary, so a failure is a build defect, not a runtime condition.
func MustLoad(fsys fs.FS, name string) *redis.Script {
	s, err := Load(fsys, name)
	if err != nil {
		panic(err)
	}
	return s
}

// Source returns the text Load sends to Redis for the script name: the
// helpers it uses, then the script.
func Source(fsys fs.FS, name string) (string, error) {
	lib, err := Helpers(fsys)
	if err != nil {
		return "", err
	}
	src, err := read(fsys, name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	done := map[string]bool{}
	var define func(h Helper)
	define = func(h Helper) {
		done[h.Name] = true
		for _, g := range lib {
			if !done[g.Name] && calls(h.Src, g.Name) {
				define(g)
			}
		}
		b.WriteString(h.Src)
		b.WriteString("\n")
	}
	for _, h := range lib {
		if !done[h.Name] && calls(src, h.Name) {
			define(h)
		}
	}
	b.WriteString(src)
	return b.String(), nil
}

// Helper is one shared function of lib/*.lua.
type Helper struct {
	Name string
	File string
	Src  string // its comment and definition
}

// Helpers reads every helper in fsys, in file and then definition order.
func Helpers(fsys fs.FS) ([]Helper, error) {
	files, err := fs.Glob(fsys, LibGlob)
	if err != nil {
		return nil, err
	}
	var out []Helper
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
		out = append(out, hs...)
	}
	return out, nil
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

// calls reports whether Lua code calls the function name, comments aside.
func calls(code, name string) bool {
	call := regexp.MustCompile(`(^|[^\w.:])` + regexp.QuoteMeta(name) + `\s*\(`)
	for line := range strings.Lines(code) {
		if code, _, _ := strings.Cut(line, "--"); call.MatchString(code) && !strings.Contains(code, "function "+name) {
			return true
		}
	}
	return false
}

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
