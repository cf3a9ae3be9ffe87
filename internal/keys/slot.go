package keys

import "strings"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot is the Redis Cluster hash slot of key: the CRC16 (XMODEM) of its
// hash tag, the bytes between its first '{' and the first '}' after it
// when there are any, or else of the whole key, modulo Slots.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := range len(key) {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}
