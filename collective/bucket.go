package collective

import "fmt"

// DefaultBucketCapBytes is PyTorch DDP's default bucket cap: bucket_cap_mb=25,
// which torch turns into int(25 * 1024 * 1024) bytes, so "25 MB" is 25 MiB.
const DefaultBucketCapBytes = 25 << 20

// Bucket is a contiguous range of parameters, [Lo, Hi) in forward order,
// whose gradients are reduced in one operation.
type Bucket struct {
	Lo, Hi int
	Bytes  int64
}

// AssignBuckets groups parameters into buckets. sizes are the parameters'
// gradient sizes in bytes, in forward (definition) order. Buckets are
// returned in reverse order, the order in which backward produces
// gradients: bucket 0 holds the last parameters, and can start its
// all-reduce while backward is still computing the earlier layers' gradients.
//
// A bucket never holds more than capBytes, except a single parameter larger
// than the cap, which is its own bucket. (PyTorch closes a bucket once it
// reaches the cap, so its buckets may exceed it by one parameter; here the
// cap is a bound.) capBytes ≤ 0 means DefaultBucketCapBytes. Every rank must
// compute the same assignment, and does: it depends on sizes and cap only.
func AssignBuckets(sizes []int64, capBytes int64) ([]Bucket, error) {
	if capBytes <= 0 {
		capBytes = DefaultBucketCapBytes
	}
	for i, s := range sizes {
		if s < 0 {
			return nil, fmt.Errorf("%w: parameter %d has %d bytes", ErrBadArgument, i, s)
		}
	}
	var out []Bucket
	hi := len(sizes)
	var bytes int64
	for i := len(sizes) - 1; i >= 0; i-- {
		if i+1 < hi && bytes+sizes[i] > capBytes {
			out = append(out, Bucket{Lo: i + 1, Hi: hi, Bytes: bytes})
			hi, bytes = i+1, 0
		}
		bytes += sizes[i]
	}
	if hi > 0 {
		out = append(out, Bucket{Lo: 0, Hi: hi, Bytes: bytes})
	}
	return out, nil
}
