package keys

import (
	"strings"
	"testing"
)

func TestKeysShareOneHashTagAndRoundTrip(t *testing.T) {
	names := []string{
		"plain", "with space", "{braced}", "}{", "a}b{c", "%7B", "nul\x00byte",
		"ünïcödé ✓", "colon:name", strings.Repeat("x", MaxName),
	}
	for _, name := range names {
		l := For("dlock", KindMutex, name)
		want := hashSlot(l.Key())
		for _, k := range []string{l.Part("fence"), l.Part("queue"), l.Channel(), l.SideChannel("w"), l.MemberChannel(name), ClientChannel(l.Channel(), "0a1b2c3d"), ClientChannel(l.SideChannel("w"), "0a1b2c3d")} {
			if got := hashSlot(k); got != want {
				t.Errorf("name %q: key %q in slot %d, main key in %d", name, k, got, want)
			}
		}
		kind, back, ok := Parse("dlock", l.Part("fence"))
		if !ok || kind != KindMutex || back != name {
			t.Errorf("Parse(%q) = %q, %q, %v; want %q, %q", l.Part("fence"), kind, back, ok, KindMutex, name)
		}
	}
}

func TestDistinctNamesGetDistinctKeys(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"a", "a}", "a%7D", "a%257D", "{a}", "%7Ba%7D"} {
		k := For("p", KindMutex, name).Key()
		if prev, dup := seen[k]; dup {
			t.Fatalf("names %q and %q share key %q", prev, name, k)
		}
		seen[k] = name
	}
}

func TestChecks(t *testing.T) {
	if CheckName("") == nil || CheckName(strings.Repeat("x", MaxName+1)) == nil {
		t.Error("CheckName accepted an empty or over-long name")
	}
	if err := CheckName(strings.Repeat("x", MaxName)); err != nil {
		t.Errorf("CheckName rejected a %d-byte name: %v", MaxName, err)
	}
	for _, p := range []string{"", "a{b", "a}"} {
		if CheckPrefix(p) == nil {
			t.Errorf("CheckPrefix(%q) accepted", p)
		}
	}
	if _, _, ok := Parse("dlock", "other:{x}:mutex"); ok {
		t.Error("Parse accepted a key of another prefix")
	}
}

// hashSlot is Redis Cluster's key-to-slot function (CRC16 of the hash tag).
func hashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
