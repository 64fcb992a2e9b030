//go:build !linux

package netemu

import (
	"context"
	"errors"
)

// Run needs Linux's TUN devices.
func Run(ctx context.Context, dev string, line *Line) (passed, dropped int64, err error) {
	return 0, 0, errors.New("netemu: TUN delay lines need Linux")
}
