// Package script loads dlock's embedded Lua scripts.
//
// Every script gets lib.lua prepended, so shared helpers (server time,
// fences) are written once. Each script must open with a header naming its
// KEYS, ARGV and what it returns; Load refuses one that does not. Scripts
// run with go-redis' Script.Run: EVALSHA, falling back to EVAL when the
// server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
package script

import (
	"fmt"
	"io/fs"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Lib is the file prepended to every script.
const Lib = "lib.lua"

// Load reads name and Lib from fsys and returns the combined script. It
// fails when a file is missing or its header lacks KEYS, ARGV or Returns.
func Load(fsys fs.FS, name string) (*redis.Script, error) {
	lib, err := read(fsys, Lib)
	if err != nil {
		return nil, err
	}
	src, err := read(fsys, name)
	if err != nil {
		return nil, err
	}
	return redis.NewScript(lib + "\n" + src), nil
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
