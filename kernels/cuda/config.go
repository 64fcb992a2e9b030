//go:build cuda

package cuda

import (
	"fmt"
	"os"
)

// Config selects a GPU and how the backend uses it.
type Config struct {
	// Device is the CUDA device ordinal.
	Device int
	// TF32 lets GEMMs of at least TF32MinDim in every dimension run on
	// TF32 tensor cores (sm_80 and newer), PyTorch's
	// allow_tf32 = True. Inputs are rounded to 10 mantissa bits, so
	// results differ from FP32 by about 1e-3 relative; off by default.
	TF32 bool
	// TF32MinDim is the smallest M, N and K that take the TF32 path; below
	// it the FP32 kernel is as fast and exact.
	TF32MinDim int
	// CacheLimitBytes bounds the device memory the caching allocator keeps
	// for reuse after Free; 0 means no bound (blocks are returned to the
	// driver only when an allocation fails, as PyTorch's allocator does).
	CacheLimitBytes int64
}

// DefaultConfig is device 0, FP32 GEMMs unless the environment variable
// TROUPE_CUDA_TF32 is "1" (the way `troupe train --device cuda` opts in).
func DefaultConfig() Config {
	return Config{TF32: os.Getenv("TROUPE_CUDA_TF32") == "1", TF32MinDim: 64}
}

// Validate checks c and fills derived defaults.
func (c *Config) Validate() error {
	if c.Device < 0 {
		return fmt.Errorf("%w: negative device ordinal %d", ErrConfig, c.Device)
	}
	if c.TF32MinDim < 0 {
		return fmt.Errorf("%w: negative TF32MinDim %d", ErrConfig, c.TF32MinDim)
	}
	if c.TF32MinDim == 0 {
		c.TF32MinDim = 64
	}
	if c.CacheLimitBytes < 0 {
		return fmt.Errorf("%w: negative CacheLimitBytes %d", ErrConfig, c.CacheLimitBytes)
	}
	return nil
}
