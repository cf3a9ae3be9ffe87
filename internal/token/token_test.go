package token

import "testing"

func TestNewIsUniqueAndSized(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		tok, err := New()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 2*Size {
			t.Fatalf("token %q has %d chars, want %d", tok, len(tok), 2*Size)
		}
		if seen[tok] {
			t.Fatalf("token %q issued twice", tok)
		}
		seen[tok] = true
	}
}
