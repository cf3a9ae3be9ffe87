//go:build !race

package token

import "testing"

// TestOfAllocatesOnce: every acquisition makes a token. (The race
// detector makes more escape, so it is left out there.)
func TestOfAllocatesOnce(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = Of("0a1b2c3d") }); n != 1 {
		t.Fatalf("Of allocates %v times, want 1", n)
	}
}
