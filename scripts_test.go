package dlock

import (
	"io/fs"
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
