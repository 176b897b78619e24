package lease

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Client is what a Store needs of go-redis: scripts, and pipelines, so a
// batch split by hash slot (Redis Cluster) still goes out at once. A
// *redis.Client, a *redis.ClusterClient and a redis.UniversalClient are
// Clients.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// slotCount is Redis Cluster's number of hash slots.
const slotCount = 16384

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag — what is between the first '{' and the first '}' after it, when
// that is not empty — or of the whole key, modulo 16384. It is what the
// cluster computes to route the key, so entries grouped by it run on the
// node that owns their keys.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^key[k]]
	}
	return int(crc) % slotCount
}

// crc16Table is CRC16-XMODEM's (polynomial 0x1021) table, computed once.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// slotBatch is one batched script call split into one call per hash slot:
// a script's keys must all hash to one slot on Redis Cluster, and every key
// of an entry carries its job's tag, so the entries of one slot (of one job,
// or of jobs whose tags collide) make one call. On a single Redis (split
// false) every entry is in the one group, and the batch is one call as
// before. Entries keep their order within a group, so two entries of one
// job — always one slot — see each other as two calls one after the other.
type slotBatch struct {
	split  bool
	head   []any // the script's leading arguments, before every group's own
	groups []*slotGroup
	slot   map[int]*slotGroup
}

type slotGroup struct {
	entries []int // the batch's indexes, in order
	keys    []string
	args    []any
}

func (s *Store) newBatch(head ...any) *slotBatch {
	return &slotBatch{split: s.cluster, head: head}
}

// add appends entry i (its keys, the first of which routes it, and its
// arguments).
func (b *slotBatch) add(i int, keys []string, args ...any) {
	var g *slotGroup
	switch {
	case !b.split:
		if len(b.groups) == 0 {
			b.groups = append(b.groups, &slotGroup{})
		}
		g = b.groups[0]
	default:
		if b.slot == nil {
			b.slot = make(map[int]*slotGroup)
		}
		sl := keySlot(keys[0])
		if g = b.slot[sl]; g == nil {
			g = &slotGroup{}
			b.slot[sl] = g
			b.groups = append(b.groups, g)
		}
	}
	g.entries = append(g.entries, i)
	g.keys = append(g.keys, keys...)
	g.args = append(g.args, args...)
}

// run runs script once per group — a single call when there is one group,
// else one pipeline, which a cluster client splits by node (one round trip
// per node, concurrently) and routes each call by its first key, following
// MOVED and ASK — and returns each entry's perEntry reply values (none when
// perEntry is 0). Any group's failure fails the call; the groups that
// succeeded stay decided, which every batch call allows (it may be repeated
// with the same holders).
func (b *slotBatch) run(ctx context.Context, rdb Client, script *redis.Script, n, perEntry int) ([][]any, error) {
	argv := func(g *slotGroup) []any {
		if len(b.head) == 0 {
			return g.args
		}
		return append(append(make([]any, 0, len(b.head)+len(g.args)), b.head...), g.args...)
	}
	cmds := make([]*redis.Cmd, len(b.groups))
	if len(b.groups) == 1 {
		cmds[0] = script.Run(ctx, rdb, b.groups[0].keys, argv(b.groups[0])...)
	} else {
		pipe := rdb.Pipeline()
		for i, g := range b.groups {
			cmds[i] = script.EvalSha(ctx, pipe, g.keys, argv(g)...)
		}
		_, _ = pipe.Exec(ctx)
		// A node that has not seen the script (new, or a replica just
		// promoted) gets its source once.
		var again redis.Pipeliner
		for i, g := range b.groups {
			if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				if again == nil {
					again = rdb.Pipeline()
				}
				cmds[i] = script.Eval(ctx, again, g.keys, argv(g)...)
			}
		}
		if again != nil {
			_, _ = again.Exec(ctx)
		}
	}
	out := make([][]any, n)
	for i, g := range b.groups {
		if err := cmds[i].Err(); err != nil {
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				// A node that stopped answering may have been failed
				// over: look up the slots again now, not at the
				// client's next periodic reload (a minute by default).
				cc.ReloadState(ctx)
			}
			return nil, err
		}
		if perEntry == 0 {
			continue
		}
		vals, err := cmds[i].Slice()
		if err != nil {
			return nil, err
		}
		if len(vals) != perEntry*len(g.entries) {
			return nil, fmt.Errorf("unexpected reply of %d values for %d entries", len(vals), len(g.entries))
		}
		for j, e := range g.entries {
			out[e] = vals[perEntry*j : perEntry*j+perEntry]
		}
	}
	return out, nil
}
