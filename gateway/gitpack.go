package gateway

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// What the gateway reads of a pushed pack: the commits in it and their
// parents, enough to tell whether a branch update is a fast-forward (the
// new head has the old one among its ancestors) before the upstream sees
// the pack. Trees, blobs and tags are inflated and dropped; a delta is
// applied only when its base is a commit. A pack's objects are read in
// order from a stream; nothing is buffered but the commits.

// Bounds on what one pack may make the gateway hold: a commit object's
// size, and all commits' together.
const (
	maxPackCommitBytes = 1 << 20
	maxPackCommitsSize = 64 << 20
)

// Pack object types (git's pack format, Documentation/gitformat-pack).
const (
	objCommit   = 1
	objTree     = 2
	objBlob     = 3
	objTag      = 4
	objOfsDelta = 6
	objRefDelta = 7
)

// packCommits holds the commits of a pack: each one's parents, by id.
type packCommits map[string][]string

// packObject is what the reader keeps of one object, by its offset: its
// type once resolved, and its content when it is a commit.
type packObject struct {
	typ  int
	data []byte
}

// countingReader counts what it hands on, and is a ByteReader, so that
// zlib reads exactly the bytes of one object and no more.
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

// readPackCommits reads a whole pack from r (its trailer included) and
// returns its commits. A pack it cannot read is an error: a push the
// gateway cannot judge is refused.
func readPackCommits(r io.Reader) (packCommits, error) {
	cr := &countingReader{r: bufio.NewReaderSize(r, 64<<10)}
	var hdr [12]byte
	if _, err := io.ReadFull(cr, hdr[:]); err != nil {
		return nil, fmt.Errorf("pack header: %w", err)
	}
	if string(hdr[:4]) != "PACK" {
		return nil, errors.New("not a pack")
	}
	if v := binary.BigEndian.Uint32(hdr[4:8]); v != 2 && v != 3 {
		return nil, fmt.Errorf("pack version %d", v)
	}
	count := binary.BigEndian.Uint32(hdr[8:12])
	objects := map[int64]*packObject{}
	byID := map[string]*packObject{}
	commits := packCommits{}
	var held int
	for i := uint32(0); i < count; i++ {
		at := cr.n
		typ, size, err := readObjectHeader(cr)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		var base *packObject
		switch typ {
		case objOfsDelta:
			rel, err := readOffset(cr)
			if err != nil || rel <= 0 || rel > at {
				return nil, fmt.Errorf("object %d: bad delta offset", i)
			}
			base = objects[at-rel]
			if base == nil {
				return nil, fmt.Errorf("object %d: delta base not in the pack", i)
			}
		case objRefDelta:
			var id [20]byte
			if _, err := io.ReadFull(cr, id[:]); err != nil {
				return nil, fmt.Errorf("object %d: %w", i, err)
			}
			base = byID[hex.EncodeToString(id[:])] // nil: an object the upstream has (a thin pack)
		case objCommit, objTree, objBlob, objTag:
		default:
			return nil, fmt.Errorf("object %d: type %d", i, typ)
		}
		o := &packObject{typ: typ}
		if base != nil {
			o.typ = base.typ
		}
		wantData := o.typ == objCommit && (typ == objCommit || base != nil && base.data != nil)
		data, err := inflate(cr, wantData, size)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		if typ == objOfsDelta || typ == objRefDelta {
			if base == nil {
				o.typ = 0 // a thin pack's delta on an object the pack does not hold: unknown
			} else if data != nil {
				data, err = applyDelta(base.data, data)
				if err != nil {
					return nil, fmt.Errorf("object %d: %w", i, err)
				}
			}
		}
		if o.typ == objCommit && data != nil {
			if held += len(data); held > maxPackCommitsSize {
				return nil, errors.New("the pack's commits are too large to check")
			}
			o.data = data
			id := objectID("commit", data)
			byID[id] = o
			commits[id] = commitParents(data)
		}
		objects[at] = o
	}
	var trailer [20]byte
	if _, err := io.ReadFull(cr, trailer[:]); err != nil {
		return nil, fmt.Errorf("pack trailer: %w", err)
	}
	return commits, nil
}

// readObjectHeader reads an object's type and inflated size.
func readObjectHeader(r io.ByteReader) (typ int, size int64, err error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	typ, size = int(c>>4)&7, int64(c&15)
	for shift := 4; c&0x80 != 0; shift += 7 {
		if shift > 56 {
			return 0, 0, errors.New("object size too large")
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, 0, err
		}
		size |= int64(c&0x7f) << shift
	}
	return typ, size, nil
}

// readOffset reads an ofs-delta's distance back to its base.
func readOffset(r io.ByteReader) (int64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	ofs := int64(c & 127)
	for c&128 != 0 {
		if ofs > 1<<48 {
			return 0, errors.New("offset too large")
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, err
		}
		ofs = (ofs+1)<<7 | int64(c&127)
	}
	return ofs, nil
}

// inflate reads one zlib stream from r: its content when keep (at most
// maxPackCommitBytes), else nothing, having read it through.
func inflate(r io.Reader, keep bool, size int64) ([]byte, error) {
	z, err := zlib.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	if !keep {
		_, err := io.Copy(io.Discard, z)
		return nil, err
	}
	if size > maxPackCommitBytes {
		return nil, fmt.Errorf("a commit of %d bytes", size)
	}
	b, err := io.ReadAll(io.LimitReader(z, maxPackCommitBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != size {
		return nil, fmt.Errorf("object is %d bytes, its header says %d", len(b), size)
	}
	// The stream's end (and checksum) still to read, if any.
	if _, err := io.Copy(io.Discard, z); err != nil {
		return nil, err
	}
	return b, nil
}

// applyDelta applies a git delta to base.
func applyDelta(base, delta []byte) ([]byte, error) {
	d := bytes.NewReader(delta)
	srcSize, err := binary.ReadUvarint(d)
	if err != nil || srcSize != uint64(len(base)) {
		return nil, errors.New("delta: base size does not match")
	}
	dstSize, err := binary.ReadUvarint(d)
	if err != nil || dstSize > maxPackCommitBytes {
		return nil, errors.New("delta: bad result size")
	}
	out := make([]byte, 0, dstSize)
	for d.Len() > 0 {
		op, _ := d.ReadByte()
		if op&0x80 != 0 {
			var off, n uint64
			for i := 0; i < 4; i++ {
				if op&(1<<i) != 0 {
					b, err := d.ReadByte()
					if err != nil {
						return nil, errors.New("delta: cut copy")
					}
					off |= uint64(b) << (8 * i)
				}
			}
			for i := 0; i < 3; i++ {
				if op&(0x10<<i) != 0 {
					b, err := d.ReadByte()
					if err != nil {
						return nil, errors.New("delta: cut copy")
					}
					n |= uint64(b) << (8 * i)
				}
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > uint64(len(base)) || uint64(len(out))+n > dstSize {
				return nil, errors.New("delta: copy out of bounds")
			}
			out = append(out, base[off:off+n]...)
		} else if op != 0 {
			n := int(op)
			if d.Len() < n || uint64(len(out)+n) > dstSize {
				return nil, errors.New("delta: cut insert")
			}
			buf := make([]byte, n)
			_, _ = d.Read(buf)
			out = append(out, buf...)
		} else {
			return nil, errors.New("delta: opcode 0")
		}
	}
	if uint64(len(out)) != dstSize {
		return nil, errors.New("delta: result size does not match")
	}
	return out, nil
}

// objectID is the SHA-1 object id of a loose object of typ with data.
func objectID(typ string, data []byte) string {
	h := sha1.New()
	h.Write([]byte(typ + " " + strconv.Itoa(len(data)) + "\x00"))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// commitParents reads the parent lines of a commit object's header.
func commitParents(data []byte) []string {
	var parents []string
	for len(data) > 0 {
		line, rest, _ := bytes.Cut(data, []byte{'\n'})
		if len(line) == 0 {
			break // the header ends
		}
		if p, ok := bytes.CutPrefix(line, []byte("parent ")); ok {
			parents = append(parents, string(p))
		}
		data = rest
	}
	return parents
}

// fastForward reports whether the commit to has from among its ancestors,
// as the pack shows them: a path from to back to from whose commits are
// all in the pack. A push that adds commits to a branch has one (the
// upstream has from, the pack holds the commits it lacks); a path that
// leaves the pack (a merge of a commit the upstream has) is not followed,
// so a fast-forward whose commits the upstream holds already on another
// branch is not seen as one: refused, never wrongly let through.
func (pc packCommits) fastForward(from, to string) bool {
	seen := map[string]bool{}
	queue := []string{to}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if id == from {
			return true
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		queue = append(queue, pc[id]...) // none for a commit the pack does not hold
	}
	return false
}
