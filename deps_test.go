package dlock

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryDependsOnGoRedisAlone checks the README's claim: the modules
// compiled into a program that imports dlock are dlock, go-redis, and
// modules go-redis itself requires; the command's and the tests' modules
// stay out.
func TestLibraryDependsOnGoRedisAlone(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the library's dependencies: %v", err)
	}
	run := func(args ...string) []string {
		out, err := exec.Command(goTool, args...).Output()
		if err != nil {
			t.Fatalf("go %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	allowed := map[string]bool{"github.com/go-dlock/dlock": true, "github.com/redis/go-redis/v9": true}
	graph := run("mod", "graph")
	for i := 0; i+1 < len(graph); i += 2 {
		if strings.HasPrefix(graph[i], "github.com/redis/go-redis/v9@") {
			dep, _, _ := strings.Cut(graph[i+1], "@")
			allowed[dep] = true
		}
	}
	for _, mod := range run("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".") {
		if !allowed[mod] {
			t.Errorf("the library compiles in module %s, which is neither go-redis nor one go-redis requires", mod)
		}
	}
}
