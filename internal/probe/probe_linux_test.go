package probe

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A read-only filesystem is what root meets where permissions do not
// stop it: the probe must still refuse it.
func TestReadOnlyFilesystem(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_RDONLY, "size=64k"); err != nil {
		t.Skipf("cannot mount a read-only tmpfs here (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	if err := File(filepath.Join(dir, "w.safetensors")); err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Errorf("File on a read-only filesystem = %v", err)
	}
	if err := Dir(filepath.Join(dir, "ckpt")); err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Errorf("Dir on a read-only filesystem = %v", err)
	}
}
