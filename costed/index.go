package costed

import (
	"hash/maphash"
	"math/bits"
)

// nameIndex finds ops by name: an open-addressing hash table of op
// indices into the ops it was made for, sized once. Each slot holds an
// op's index+1 (0: empty) and the high 32 bits of its name's hash, so a
// probe compares a name only on a likely match. A million names take
// 16 MB, where a map[string]int32 took 80 MB and more time to fill.
type nameIndex struct {
	ops   []Op
	slots []uint64
	mask  uint64
}

func newNameIndex(ops []Op) *nameIndex {
	size := uint64(1) << bits.Len64(uint64(2*len(ops)+1)) // at most half full
	return &nameIndex{ops: ops, slots: make([]uint64, size), mask: size - 1}
}

// add puts ops[i] under its name, unless an op is there already: then
// it returns that op, the first with the name, and false.
func (x *nameIndex) add(i int32) (int32, bool) {
	name := x.ops[i].Name
	h := hashName(name)
	tag := h &^ (1<<32 - 1)
	for k := h & x.mask; ; k = (k + 1) & x.mask {
		s := x.slots[k]
		if s == 0 {
			x.slots[k] = tag | uint64(i+1)
			return i, true
		}
		if s&^(1<<32-1) == tag {
			if j := int32(s&(1<<32-1)) - 1; x.ops[j].Name == name {
				return j, false
			}
		}
	}
}

// find is the first op named name. A nil index finds nothing.
func (x *nameIndex) find(name string) (int32, bool) {
	if x == nil {
		return -1, false
	}
	h := hashName(name)
	tag := h &^ (1<<32 - 1)
	for k := h & x.mask; ; k = (k + 1) & x.mask {
		s := x.slots[k]
		if s == 0 {
			return -1, false
		}
		if s&^(1<<32-1) == tag {
			if j := int32(s&(1<<32-1)) - 1; x.ops[j].Name == name {
				return j, true
			}
		}
	}
}

// nameSeed seeds the names' hash: once per process, so the index of one
// list of ops is the same however often it is built, while a file cannot
// be made of names that all collide.
var nameSeed = maphash.MakeSeed()

// hashName hashes an op name.
func hashName(s string) uint64 { return maphash.String(nameSeed, s) }
