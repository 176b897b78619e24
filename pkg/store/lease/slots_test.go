package lease

import "testing"

// keySlot must agree with Redis Cluster (CLUSTER KEYSLOT), or a batch's
// groups would land on the wrong node and be refused (CROSSSLOT, MOVED).
// The expected slots are the ones Redis 7 answers.
func TestKeySlotMatchesRedisCluster(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":                12739, // the CRC16-XMODEM check value 0x31C3
		"foo":                      12182,
		"bar":                      5061,
		"{user1000}.following":     keySlot("user1000"),
		"foo{}{bar}":               keySlot("foo{}{bar}"),
		"foo{{bar}}zap":            keySlot("{bar"),
		"foo{bar}{zap}":            keySlot("bar"),
		"sundial:{j:job-1}:done:x": keySlot("j:job-1"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("foo{}{bar}") == keySlot("bar") {
		t.Error("an empty tag {} must hash the whole key, not the next tag")
	}
}
