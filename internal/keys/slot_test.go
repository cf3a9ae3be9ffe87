package keys

import "testing"

// The slots Redis' CLUSTER KEYSLOT gives (see its documentation), and its
// hash tag rules: an empty tag, or none closed, hashes the whole key.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"{hash_tag}bar": 2515,
		"hash_tag":      2515,
		"123456789":     0x31C3 % Slots, // CRC16/XMODEM's check value
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	for _, same := range [][2]string{{"a{}b", "a{}b"}, {"{user1000}.following", "{user1000}.followers"}, {"x{y", "x{y"}} {
		if Slot(same[0]) != Slot(same[1]) {
			t.Errorf("Slot(%q) != Slot(%q)", same[0], same[1])
		}
	}
	if Slot("a{}b") == Slot("") || Slot("x{y") == Slot("y") {
		t.Error("an empty or unclosed tag is not the whole key's hash")
	}
	if l := For("dlock", KindMutex, "job"); Slot(l.Key()) != Slot(l.Part("fence")) || Slot(l.Key()) != Slot("job") {
		t.Error("a lock's keys are not all in the slot of its name")
	}
}
