package kerneltest

import (
	"fmt"
	"math"
)

// testBuffers checks the memory methods every other test relies on: Alloc
// zeroes, Upload/Download round-trip bit for bit, Copy and Fill, and Views
// share their parent's memory (so writes through a View, by Upload, Fill or
// a kernel, land in the parent and nowhere else).
func testBuffers(s *suite) {
	if caps := s.be.Caps(); caps.Device == "" || caps.Threads < 1 {
		s.t.Errorf("Caps() = %+v: want a device name and Threads ≥ 1", caps)
	}
	for _, n := range lengths {
		s.run(fmt.Sprintf("AllocUploadDownload/%d", n), func(c *tcase) {
			b := c.be.Alloc(n)
			c.check("Alloc", c.down(b), make([]float64, n), exact(n))
			// Bit patterns a lossy path would change: NaN payloads aside,
			// negative zero, denormals, infinities, the extremes.
			vals := c.randn(n, 0, 1)
			special := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), 1e-40}
			copy(vals, special)
			c.be.Upload(b, vals)
			got := c.down(b)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(vals[i]) {
					c.Fatalf("Download[%d] = %g (bits %#x) after Upload of %g (bits %#x)", i, got[i], math.Float32bits(got[i]), vals[i], math.Float32bits(vals[i]))
				}
			}
			dst := c.be.Alloc(n)
			c.be.Copy(dst, b)
			c.check("Copy", c.down(dst), widen(vals), exact(n))
			c.be.Fill(dst, -2.5)
			want := make([]float64, n)
			for i := range want {
				want[i] = -2.5
			}
			c.check("Fill", c.down(dst), want, exact(n))
			c.check("Fill left source", c.down(b), widen(vals), exact(n))
			c.be.Free(b)
			c.be.Free(dst)
		})
	}
	s.run("View", func(c *tcase) {
		const n = 40
		base := c.randn(n, 0, 1)
		parent := c.up(base)
		want := widen(base)
		v := c.be.View(parent, 5, 20)
		if v.Len() != 20 {
			c.Fatalf("View(parent, 5, 20).Len() = %d", v.Len())
		}
		// Upload through the view.
		vals := c.randn(20, 3, 1)
		c.be.Upload(v, vals)
		for i, x := range vals {
			want[5+i] = float64(x)
		}
		c.check("parent after Upload to View", c.down(parent), want, exact(n))
		c.check("View after Upload", c.down(v), want[5:25], exact(20))
		// A view of a view, written by Fill.
		vv := c.be.View(v, 10, 4)
		c.be.Fill(vv, 7)
		for i := 15; i < 19; i++ {
			want[i] = 7
		}
		c.check("parent after Fill of View of View", c.down(parent), want, exact(n))
		// A kernel writing through a view, reading another view of the
		// same parent.
		a, b := c.be.View(parent, 0, 5), c.be.View(parent, 30, 5)
		c.be.Add(a, a, b)
		for i := 0; i < 5; i++ {
			want[i] = float64(float32(want[i]) + float32(want[30+i]))
		}
		c.check("parent after Add into View", c.down(parent), want, exact(n))
		// Writes to the parent show through the view.
		c.be.Scale(parent, 2)
		for i := range want {
			want[i] *= 2
		}
		c.check("View after Scale of parent", c.down(v), want[5:25], exact(20))
	})
	s.run("UploadIndex", func(c *tcase) {
		// Index buffers cannot be downloaded; Embedding reads them back.
		table := c.randn(10*3, 0, 1)
		ids := []int32{9, 0, 4, 4, 1}
		y := c.be.Alloc(len(ids) * 3)
		c.be.Embedding(y, c.up(table), c.upIdx(ids))
		want := make([]float64, 0, len(ids)*3)
		for _, id := range ids {
			want = append(want, widen(table[id*3:(id+1)*3])...)
		}
		c.check("Embedding of uploaded ids", c.down(y), want, exact(len(want)))
		// A fresh AllocIndex is zero: every row gathers table row 0.
		zero := c.be.AllocIndex(4)
		y = c.be.Alloc(4 * 3)
		c.be.Embedding(y, c.up(table), zero)
		want = want[:0]
		for range 4 {
			want = append(want, widen(table[:3])...)
		}
		c.check("Embedding of AllocIndex", c.down(y), want, exact(len(want)))
		c.be.FreeIndex(zero)
	})
}
