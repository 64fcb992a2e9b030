package data

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"unsafe"
)

// llm.c's token shard (dev/data/data_common.py write_datafile): a header
// of 256 little-endian int32 — magic, version, token count, the rest 0 —
// then the tokens as little-endian uint16.
const (
	ShardMagic       = 20240520
	ShardVersion     = 1
	ShardHeaderBytes = 256 * 4
	// MaxShardVocab is the largest vocabulary uint16 tokens can hold.
	MaxShardVocab = 1 << 16
)

// shardLayout is where a shard file's tokens are: count uint16 tokens from
// byte offset.
type shardLayout struct {
	offset int64
	count  int64
}

// parseShardHeader reads the layout of a shard file of size bytes whose
// first bytes are head (at most ShardHeaderBytes; fewer when the file is
// shorter). A file that starts with llm.c's magic must be a whole llm.c
// shard of version 1; any other is read as headerless uint16 tokens
// (nanoGPT's train.bin and val.bin) when headerless is set, else it has a
// bad magic. Errors name path.
func parseShardHeader(path string, head []byte, size int64, headerless bool) (shardLayout, error) {
	bad := func(format string, args ...any) (shardLayout, error) {
		return shardLayout{}, fmt.Errorf("%w: token shard %s: %s", ErrFormat, path, fmt.Sprintf(format, args...))
	}
	if size < 0 || int64(len(head)) > size {
		return bad("%d header bytes read from a file of %d", len(head), size)
	}
	if len(head) >= 4 && binary.LittleEndian.Uint32(head) == ShardMagic {
		if len(head) < ShardHeaderBytes {
			return bad("truncated: %d bytes, shorter than llm.c's %d-byte header", size, ShardHeaderBytes)
		}
		if v := int32(binary.LittleEndian.Uint32(head[4:])); v != ShardVersion {
			if v == 2 {
				return bad("version 2 (llm.c's uint32 tokens, for LLaMA 3) is not supported; want version 1 (uint16 tokens)")
			}
			return bad("version %d, want %d", v, ShardVersion)
		}
		n := int64(int32(binary.LittleEndian.Uint32(head[8:])))
		if n < 0 {
			return bad("header says %d tokens", n)
		}
		have := (size - ShardHeaderBytes) / 2
		switch {
		case have < n:
			return bad("truncated: the header says %d tokens, the file holds %d", n, have)
		case ShardHeaderBytes+2*n != size:
			return bad("%d bytes after the header's %d tokens", size-ShardHeaderBytes-2*n, n)
		}
		return shardLayout{offset: ShardHeaderBytes, count: n}, nil
	}
	if !headerless {
		var magic uint32
		if len(head) >= 4 {
			magic = binary.LittleEndian.Uint32(head)
		}
		return bad("bad magic %d, want llm.c's %d (a headerless file of uint16 tokens must be named train.bin or val.bin, as nanoGPT's)", magic, ShardMagic)
	}
	if size%2 != 0 {
		return bad("%d bytes: an odd size cannot hold uint16 tokens", size)
	}
	return shardLayout{offset: 0, count: size / 2}, nil
}

// headerlessName reports whether a file is read without llm.c's header
// when it lacks llm.c's magic: nanoGPT's names.
func headerlessName(path string) bool {
	b := filepath.Base(path)
	return b == "train.bin" || b == "val.bin"
}

// shardHeader returns llm.c's header for a shard of n tokens.
func shardHeader(n int) []byte {
	h := make([]byte, ShardHeaderBytes)
	binary.LittleEndian.PutUint32(h, ShardMagic)
	binary.LittleEndian.PutUint32(h[4:], ShardVersion)
	binary.LittleEndian.PutUint32(h[8:], uint32(n))
	return h
}

// WriteShard writes tokens as an llm.c shard to w.
func WriteShard(w io.Writer, tokens []uint16) error {
	if len(tokens) > math.MaxInt32 {
		return fmt.Errorf("%w: a shard holds at most %d tokens, got %d", ErrOptions, math.MaxInt32, len(tokens))
	}
	if _, err := w.Write(shardHeader(len(tokens))); err != nil {
		return err
	}
	_, err := w.Write(uint16Bytes(tokens))
	return err
}

// uint16Bytes views tokens as little-endian bytes (every platform troupe
// builds for is little-endian).
func uint16Bytes(tokens []uint16) []byte {
	if len(tokens) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 2*len(tokens))
}

// shard is one token file, memory-mapped: its pages are read when a
// sample touches them and the kernel may drop them again, so a corpus
// larger than memory trains.
type shard struct {
	path string
	toks []uint16
	mem  *mapping
}

// openShard maps the shard at path and checks that its ids are below
// vocab (0: no bound) and returns the largest id.
func openShard(path string, vocab int) (*shard, uint16, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: token shard: %v", ErrNotFound, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("%w: token shard %s: %v", ErrNotFound, path, err)
	}
	head := make([]byte, min(st.Size(), ShardHeaderBytes))
	if _, err := io.ReadFull(f, head); err != nil {
		return nil, 0, fmt.Errorf("%w: token shard %s: %v", ErrFormat, path, err)
	}
	lay, err := parseShardHeader(path, head, st.Size(), headerlessName(path))
	if err != nil {
		return nil, 0, err
	}
	if lay.count == 0 {
		return nil, 0, fmt.Errorf("%w: token shard %s holds no tokens", ErrFormat, path)
	}
	hi, err := scanShard(f, path, lay, vocab)
	if err != nil {
		return nil, 0, err
	}
	m, err := mapFile(f, st.Size())
	if err != nil {
		return nil, 0, fmt.Errorf("token shard %s: %w", path, err)
	}
	b := m.data[lay.offset : lay.offset+2*lay.count]
	toks := unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), lay.count)
	return &shard{path: path, toks: toks, mem: m}, hi, nil
}

// scanShard reads the shard's tokens (through a small buffer, not the
// mapping, so that the check leaves no pages resident) and returns the
// largest, failing on one ≥ vocab when vocab > 0.
func scanShard(f *os.File, path string, lay shardLayout, vocab int) (uint16, error) {
	buf := make([]uint16, 1<<19)
	var hi uint16
	for at := int64(0); at < lay.count; {
		n := min(int64(len(buf)), lay.count-at)
		chunk := buf[:n]
		if _, err := f.ReadAt(uint16Bytes(chunk), lay.offset+2*at); err != nil {
			return 0, fmt.Errorf("%w: token shard %s: %v", ErrFormat, path, err)
		}
		for i, t := range chunk {
			if vocab > 0 && int(t) >= vocab {
				return 0, fmt.Errorf("%w: token shard %s: token %d is %d, outside the vocabulary [0, %d)", ErrFormat, path, at+int64(i), t, vocab)
			}
			hi = max(hi, t)
		}
		at += n
	}
	return hi, nil
}
