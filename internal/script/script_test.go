package script

import (
	"strings"
	"testing"
	"testing/fstest"
)

const header = "-- KEYS[1] k\n-- ARGV none\n-- Returns 1\n"

// lib has three helpers: b calls a, c calls nobody, d calls itself.
var lib = fstest.MapFS{
	"lib/one.lua": {Data: []byte("-- one.lua: a family\n\n-- a is first.\nlocal function a()\n  return 1\nend\n\n" +
		"-- b calls a.\nlocal function b()\n  return a() + 1\nend\n")},
	"lib/two.lua": {Data: []byte("local function c()\n  return 3\nend\n\nlocal function d(n)\n  if n > 0 then return d(n - 1) end\n  return 0\nend\n")},
}

func withScript(name, src string) fstest.MapFS {
	fsys := fstest.MapFS{name: {Data: []byte(src)}}
	for k, v := range lib {
		fsys[k] = v
	}
	return fsys
}

func TestSourceCarriesOnlyTheHelpersItCallsEachBeforeItsUse(t *testing.T) {
	fsys := withScript("s.lua", header+"-- c() is only named in a comment\nreturn b() + d(2)\n")
	src, err := Source(fsys, "s.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"local function a()", "local function b()", "local function d(n)", "-- b calls a."} {
		if !strings.Contains(src, want) {
			t.Errorf("source lacks %q:\n%s", want, src)
		}
	}
	if strings.Contains(src, "local function c()") || strings.Contains(src, "a family") {
		t.Errorf("source carries what the script does not call:\n%s", src)
	}
	if a, b, s := strings.Index(src, "function a"), strings.Index(src, "function b"), strings.Index(src, header); !(a < b && b < s) {
		t.Errorf("helpers not defined before their use (a %d, b %d, script %d):\n%s", a, b, s, src)
	}
}

func TestSourceCarriesAHelperPassedToPcallNotOneNamedInAString(t *testing.T) {
	fsys := withScript("s.lua", header+"local ok, v = pcall(c)\nreturn redis.call('d', \"a \\\" b\", v)\n")
	src, err := Source(fsys, "s.lua")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(src, "local function c()") {
		t.Errorf("source lacks c, which it passes to pcall:\n%s", src)
	}
	for _, unused := range []string{"local function a()", "local function b()", "local function d(n)"} {
		if strings.Contains(src, unused) {
			t.Errorf("source carries %q, named only in strings:\n%s", unused, src)
		}
	}
}

// A local variable named like a helper is no use of it: it neither pulls
// the helper in nor puts it before the helpers that call it.
func TestSourceIgnoresALocalNamedLikeAHelper(t *testing.T) {
	fsys := withScript("s.lua", header+"local a, d = 1, 2\nreturn b() + a + d\n")
	src, err := Source(fsys, "s.lua")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(src, "local function d(n)") {
		t.Errorf("source carries d, only a local's name:\n%s", src)
	}
	if a, b := strings.Index(src, "function a"), strings.Index(src, "function b"); a < 0 || a > b {
		t.Errorf("a, which b calls, not defined before b:\n%s", src)
	}
}

func TestSourceDefinesHelpersAtTheMarkWhenOnlyTheRestNeedsThem(t *testing.T) {
	fast, slow := "if KEYS[1] then return a() end\n", "return b() + d(1)\n"
	src, err := Source(withScript("s.lua", header+fast+HelpersMark+"\n"+slow), "s.lua")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(src, HelpersMark) {
		t.Errorf("source keeps the mark:\n%s", src)
	}
	if n := strings.Count(src, "local function a()"); n != 1 {
		t.Errorf("a defined %d times, want once:\n%s", n, src)
	}
	at := func(s string) int { return strings.Index(src, s) }
	if !(at("function a") < at(fast) && at(fast) < at("function b") && at(fast) < at("function d") &&
		at("function b") < at(slow) && at("function d") < at(slow)) {
		t.Errorf("helpers not defined where first needed:\n%s", src)
	}
}

func TestSourceWithoutHelpersIsTheScript(t *testing.T) {
	src := header + "return 1\n"
	got, err := Source(withScript("s.lua", src), "s.lua")
	if err != nil || got != src {
		t.Errorf("Source = %q, %v; want the script alone", got, err)
	}
}

func TestLoadRefusesBadScriptsAndHelpers(t *testing.T) {
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"no header", withScript("s.lua", "-- nothing\nreturn 1\n"), "KEYS"},
		{"missing", withScript("other.lua", header), "s.lua"},
		{"code in a helper file", fstest.MapFS{"s.lua": {Data: []byte(header)}, "lib/x.lua": {Data: []byte("local x = 1\n")}}, "only local functions"},
		{"unterminated helper", fstest.MapFS{"s.lua": {Data: []byte(header)}, "lib/x.lua": {Data: []byte("local function x()\n  return 1\n")}}, "no `end`"},
		{"helper twice", fstest.MapFS{"s.lua": {Data: []byte(header)}, "lib/x.lua": {Data: []byte("local function x()\nend\n")},
			"lib/y.lua": {Data: []byte("local function x()\nend\n")}}, "defined in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Load(tc.fsys, "s.lua"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
