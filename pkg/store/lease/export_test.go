package lease

// SplitBySlot makes s split its batches by hash slot as on a cluster
// client, so the pipelined path runs against a single Redis too.
func SplitBySlot(s *Store) { s.cluster = true }

// KeySlot is keySlot, for the tests outside the package.
func KeySlot(key string) int { return keySlot(key) }
