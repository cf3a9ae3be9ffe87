// Package token makes the secrets that prove a lease belongs to its holder.
package token

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// Size is the number of bytes in a token, drawn from crypto/rand: 128
// bits, so a token can be neither guessed nor collide in practice.
const Size = 16

// ClientSize is the number of bytes of a client id (see Client), which
// starts each token the client makes (see Of): a token's first
// 2*ClientSize hex digits name the client that made it, and its other
// Size-ClientSize bytes (96 bits) are its own. A release that hands a
// lock to a waiter tells it on a channel named by them
// (keys.ClientChannel), which the Lua helper client_channel reads with
// the same length.
const ClientSize = 4

// Client returns a fresh client id: ClientSize bytes from crypto/rand,
// hex encoded. Two clients that draw the same id hear each other's
// hand-offs, as every client waiting for a lock did before ids: nothing
// worse.
func Client() (string, error) {
	var b [ClientSize]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dlock: reading random client id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Of returns a fresh token of the client id (one Client made): the id,
// then Size-ClientSize bytes from crypto/rand, hex encoded. One
// allocation.
func Of(id string) (string, error) {
	if len(id) != 2*ClientSize {
		return "", fmt.Errorf("dlock: client id %q is not %d hex digits", id, 2*ClientSize)
	}
	var r [Size - ClientSize]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("dlock: reading random token: %w", err)
	}
	var out [2 * Size]byte
	copy(out[:], id)
	hex.Encode(out[len(id):], r[:])
	return string(out[:]), nil
}
