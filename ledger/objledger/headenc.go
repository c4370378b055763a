package objledger

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"
)

// rowCache keeps, per shard, the JSON of the rows of the head this process
// last encoded ("id":{…}, as json.Marshal writes a map entry). A head write
// changes a few rows of up to CompactAt, and rows are never changed in place
// (put stores a new one), so encoding a head is mostly copying the bytes of
// rows it encoded before. Only the last head's rows are kept: memory stays at
// one head's bytes per shard.
type rowCache struct {
	mu     sync.Mutex
	shards map[int]map[*row]rowJSON
}

type rowJSON struct {
	id   string // the row's id when it was encoded (a row is stored under one)
	frag []byte
}

// encodeHead is json.Marshal(h), byte for byte (TestEncodeHeadIsMarshal),
// with the rows' encoding reused from the shard's previous head.
func (c *rowCache) encodeHead(s int, h *head) ([]byte, error) {
	c.mu.Lock()
	prev := c.shards[s]
	c.mu.Unlock()
	ids := make([]string, 0, len(h.Rows))
	size := 64
	for id, r := range h.Rows {
		ids = append(ids, id)
		if e, ok := prev[r]; ok && e.id == id {
			size += len(e.frag) + 1
		} else {
			size += 256
		}
	}
	slices.Sort(ids) // json.Marshal's order for a map with string keys
	next := make(map[*row]rowJSON, len(ids))
	out := make([]byte, 0, size)
	out = append(out, '{')
	if h.Base != "" {
		out = append(out, `"base":`...)
		out = appendJSON(out, h.Base)
		out = append(out, ',')
	}
	if len(h.Segs) > 0 {
		out = append(out, `"segs":`...)
		out = appendJSON(out, h.Segs)
		out = append(out, ',')
	}
	out = append(out, `"seq":`...)
	out = strconv.AppendInt(out, h.Seq, 10)
	out = append(out, `,"rows":`...)
	if h.Rows == nil {
		out = append(out, "null"...)
	} else {
		out = append(out, '{')
	}
	for i, id := range ids {
		if i > 0 {
			out = append(out, ',')
		}
		r := h.Rows[id]
		e, ok := prev[r]
		if !ok || e.id != id {
			frag := appendJSON(nil, id)
			frag = append(frag, ':')
			data, err := json.Marshal(r)
			if err != nil {
				return nil, err
			}
			e = rowJSON{id: id, frag: append(frag, data...)}
		}
		next[r] = e
		out = append(out, e.frag...)
	}
	if h.Rows != nil {
		out = append(out, '}')
	}
	if len(h.Trash) > 0 {
		out = append(out, `,"trash":`...)
		out = appendJSON(out, h.Trash)
	}
	out = append(out, '}')
	c.mu.Lock()
	if c.shards == nil {
		c.shards = map[int]map[*row]rowJSON{}
	}
	c.shards[s] = next
	c.mu.Unlock()
	return out, nil
}

// appendJSON appends json.Marshal(v) for values that always encode (strings,
// string slices, trash).
func appendJSON(out []byte, v any) []byte {
	data, _ := json.Marshal(v)
	return append(out, data...)
}
