package dlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeMatchesExamples keeps the README's code blocks identical to the
// bodies of the Example functions they are marked with, so the README's
// code always compiles and its printed results are checked.
func TestReadmeMatchesExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") {
			continue
		}
		body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		bodies[fn.Name.Name] = exampleAsReadme(body)
	}
	marked := regexp.MustCompile("(?s)<!-- example: (\\w+) -->\n```go\n(.*?)```")
	matches := marked.FindAllStringSubmatch(string(readme), -1)
	if len(matches) == 0 {
		t.Fatal("README has no example blocks")
	}
	for _, m := range matches {
		want, ok := bodies[m[1]]
		if !ok {
			t.Errorf("README names %s, which example_test.go does not define", m[1])
			continue
		}
		if m[2] != want {
			t.Errorf("README block for %s differs from the example; want:\n%s", m[1], want)
		}
	}
}

// exampleAsReadme turns an Example body into README text: one indent
// less, no Output comment, and a plain address for the test server's.
func exampleAsReadme(body string) string {
	var out []string
	for _, line := range strings.Split(strings.Trim(body, "\n"), "\n") {
		line = strings.TrimPrefix(line, "\t")
		if strings.HasPrefix(line, "// Output:") || (strings.HasPrefix(line, "// ") && len(out) > 0 && strings.HasPrefix(out[len(out)-1], "// Output:")) {
			out = append(out, "// Output:")
			continue
		}
		out = append(out, line)
	}
	for len(out) > 0 && out[len(out)-1] == "// Output:" {
		out = out[:len(out)-1]
	}
	text := strings.Join(out, "\n") + "\n"
	text = strings.ReplaceAll(text, "Addr: exampleAddr", `Addr: "localhost:6379"`)
	return strings.ReplaceAll(text, "range redlockAddrs", `range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"}`)
}
