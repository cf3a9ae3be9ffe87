package redistest

import (
	"os"
	"strings"
	"testing"
)

// ACLRules reads the ACL SETUSER command for the dlock user from the
// README at readme, with password in place of its placeholder
// (">change-me"), as arguments for a go-redis Do: the tests apply exactly
// the rules the README documents.
func ACLRules(t testing.TB, readme, password string) []any {
	t.Helper()
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, "ACL SETUSER dlock ") {
			continue
		}
		var args []any
		for _, f := range strings.Fields(line) {
			if f == ">change-me" {
				f = ">" + password
			}
			args = append(args, f)
		}
		return args
	}
	t.Fatalf("%s has no ACL SETUSER dlock line", readme)
	return nil
}
