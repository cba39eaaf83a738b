package bolt

import (
	"encoding/binary"

	"github.com/fenceq/fenceq/db"
)

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// sortableTime maps Unix nanoseconds to an unsigned value with the same order.
func sortableTime(ns int64) uint64 { return uint64(ns) ^ (1 << 63) }

// descPriority maps a priority to an unsigned value that sorts higher
// priorities first.
func descPriority(p int64) uint64 { return ^(uint64(p) ^ (1 << 63)) }

func queuePrefix(queue string) []byte {
	b := make([]byte, 0, len(queue)+1)
	return append(append(b, queue...), 0)
}

func readyKey(r *jobRecord) []byte {
	k := queuePrefix(r.Queue)
	k = binary.BigEndian.AppendUint64(k, descPriority(r.Priority))
	k = binary.BigEndian.AppendUint64(k, sortableTime(r.RunAt))
	return binary.BigEndian.AppendUint64(k, r.ID)
}

func scheduledKey(r *jobRecord) []byte {
	k := make([]byte, 0, 16)
	k = binary.BigEndian.AppendUint64(k, sortableTime(r.RunAt))
	return binary.BigEndian.AppendUint64(k, r.ID)
}

func scheduledQueueKey(r *jobRecord) []byte {
	k := queuePrefix(r.Queue)
	k = binary.BigEndian.AppendUint64(k, sortableTime(r.RunAt))
	return binary.BigEndian.AppendUint64(k, r.ID)
}

func claimedKey(r *jobRecord) []byte {
	k := queuePrefix(r.Queue)
	k = binary.BigEndian.AppendUint64(k, sortableTime(r.LeaseExpiresAt))
	return binary.BigEndian.AppendUint64(k, r.ID)
}

func finishedKey(r *jobRecord) []byte {
	k := make([]byte, 0, 16)
	k = binary.BigEndian.AppendUint64(k, sortableTime(r.UpdatedAt))
	return binary.BigEndian.AppendUint64(k, r.ID)
}

func deadKey(r *jobRecord) []byte {
	k := queuePrefix(r.Queue)
	k = binary.BigEndian.AppendUint64(k, sortableTime(r.UpdatedAt))
	return binary.BigEndian.AppendUint64(k, r.ID)
}

func countKey(queue string, state db.State) []byte {
	return append(queuePrefix(queue), state...)
}

// idFromKey reads the id in the last 8 bytes of an index key.
func idFromKey(k []byte) uint64 { return binary.BigEndian.Uint64(k[len(k)-8:]) }

// timeFromKey reads a sortable time at offset off of an index key.
func timeFromKey(k []byte, off int) int64 {
	return int64(binary.BigEndian.Uint64(k[off:off+8]) ^ (1 << 63))
}
