// Package token makes the secrets that prove a lease belongs to its holder.
package token

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Size is the number of random bytes in a token: 128 bits, so a token can be
// neither guessed nor collide in practice.
const Size = 16

// New returns a fresh token: Size bytes from crypto/rand, hex encoded.
func New() (string, error) {
	var b [Size]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dlock: reading random token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
