package token

import (
	"strings"
	"testing"
)

func TestOfStartsWithItsClient(t *testing.T) {
	id, err := Client()
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 2*ClientSize {
		t.Fatalf("client id %q has %d chars, want %d", id, len(id), 2*ClientSize)
	}
	seen := make(map[string]bool)
	for range 1000 {
		tok, err := Of(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 2*Size || !strings.HasPrefix(tok, id) {
			t.Fatalf("token %q of client %q: want %d chars starting with the id", tok, id, 2*Size)
		}
		if seen[tok] {
			t.Fatalf("token %q issued twice", tok)
		}
		seen[tok] = true
	}
}

func TestOfRefusesAnIdItDidNotMake(t *testing.T) {
	if _, err := Of("abc"); err == nil {
		t.Fatal("Of took a client id of 3 digits")
	}
}
