//go:build long

package e2e

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/data"
	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// writeCorpus writes n uint16 tokens (ids below 50257, a cheap
// pseudo-random stream) as llm.c shards of at most per tokens in dir,
// with a val shard of 4096 tokens.
func writeCorpus(t *testing.T, dir string, n, per int64) {
	t.Helper()
	x := uint64(0x9e3779b97f4a7c15)
	write := func(name string, count int64) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		w.Write(headerOf(count))
		var b [2]byte
		for range count {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint16(b[:], uint16(x%50257))
			w.Write(b[:])
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := int64(0); i*per < n; i++ {
		write(fmt.Sprintf("big_train_%06d.bin", i), min(per, n-i*per))
	}
	write("big_val_000000.bin", 4096)
}

func headerOf(n int64) []byte {
	h := make([]byte, data.ShardHeaderBytes)
	binary.LittleEndian.PutUint32(h, data.ShardMagic)
	binary.LittleEndian.PutUint32(h[4:], data.ShardVersion)
	binary.LittleEndian.PutUint32(h[8:], uint32(n))
	return h
}

// trainPeak trains a small GPT on the shards in dir and returns the
// process's peak resident memory (getrusage's maxrss: anonymous and
// file-backed pages) and its wall time.
func trainPeak(t *testing.T, dir string, shuffle bool) (int64, time.Duration) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(e2etest.Bin, "train", "--model", "gpt", "--data", dir, "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
		"--context", "64", "--batch", "16", "--steps", "30", "--eval-batches", "2", "--threads", "2", "--log-format", "json",
		fmt.Sprintf("--shuffle=%v", shuffle))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("train on %s: %v\n%s", dir, err, out)
	}
	return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10, time.Since(start)
}

// TestShardsMemoryFlat: training on 2^30 tokens (2 GiB of shards) holds
// no more memory than training on 2^20 (2 MiB), in order and shuffled:
// the shards are memory-mapped, checked through a small buffer, their
// pages leave the resident set every 16 windows, and the sampler over
// 16 M windows permutes on the fly. The peak (about 480 MiB) is the
// model's: a batch of 16 × 64 logits over 50,257 ids and their gradient.
func TestShardsMemoryFlat(t *testing.T) {
	small, big := filepath.Join(t.TempDir(), "small"), filepath.Join(t.TempDir(), "big")
	os.MkdirAll(small, 0o755)
	os.MkdirAll(big, 0o755)
	writeCorpus(t, small, 1<<20, 1<<27)
	start := time.Now()
	writeCorpus(t, big, 1<<30, 1<<27)
	t.Logf("wrote 2^30 tokens (%d MiB) in 8 shards in %v", (1<<31)>>20, time.Since(start).Round(time.Millisecond))
	for _, shuffle := range []bool{false, true} {
		ps, ws := trainPeak(t, small, shuffle)
		pb, wb := trainPeak(t, big, shuffle)
		t.Logf("shuffle=%v: peak RSS %.1f MiB on 2^20 tokens (%v), %.1f MiB on 2^30 tokens (%v)",
			shuffle, float64(ps)/(1<<20), ws.Round(time.Millisecond), float64(pb)/(1<<20), wb.Round(time.Millisecond))
		// 2 GiB more corpus may cost the pages mapped since the last
		// release (at most 16 folios of 2 MiB: data.releaseEvery) and
		// noise, not the corpus: 48 MiB is 2.3% of it.
		if pb-ps > 48<<20 {
			t.Errorf("shuffle=%v: peak RSS grew by %.1f MiB from 2 MiB to 2 GiB of tokens", shuffle, float64(pb-ps)/(1<<20))
		}
	}
}
