package script

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadChecksHeaderAndPrependsLib(t *testing.T) {
	fsys := fstest.MapFS{
		"lib.lua":  {Data: []byte("-- lib\n-- KEYS none ARGV none Returns nothing\nlocal function f() end\n")},
		"good.lua": {Data: []byte("-- good\n-- KEYS[1] k\n-- ARGV none\n-- Returns 1\nreturn 1\n")},
		"bad.lua":  {Data: []byte("-- bad: no header\nreturn 1\n")},
	}
	s, err := Load(fsys, "good.lua")
	if err != nil {
		t.Fatal(err)
	}
	want := sha1.Sum(append(append(fsys["lib.lua"].Data, '\n'), fsys["good.lua"].Data...))
	if s.Hash() != hex.EncodeToString(want[:]) {
		t.Errorf("script hash %s is not that of lib.lua + good.lua", s.Hash())
	}
	if _, err := Load(fsys, "bad.lua"); err == nil || !strings.Contains(err.Error(), "KEYS") {
		t.Errorf("Load(bad.lua) = %v, want a header error", err)
	}
	if _, err := Load(fsys, "missing.lua"); err == nil {
		t.Error("Load(missing.lua) succeeded")
	}
}
