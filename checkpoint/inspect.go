package checkpoint

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"
	"slices"
)

// DirReport describes a checkpoint root directory: what `troupe ckpt
// inspect` prints.
type DirReport struct {
	Dir string `json:"dir"`
	// Latest is the step the latest pointer names, -1 when there is none.
	Latest int64 `json:"latest"`
	// Checkpoints are the step directories, oldest first.
	Checkpoints []CheckpointReport `json:"checkpoints"`
	// Leftovers are temporary directories and files of commits that did not
	// finish; the next commit removes them.
	Leftovers []string `json:"leftovers,omitempty"`
	// OK is true when the latest pointer is sound and every checkpoint
	// verified.
	OK bool `json:"ok"`
	// Error is the problem with the latest pointer, if any.
	Error string `json:"error,omitempty"`
}

// CheckpointReport describes one checkpoint directory.
type CheckpointReport struct {
	Name string `json:"name"`
	Step int64  `json:"step"`
	// Latest is true for the directory the latest pointer names.
	Latest bool `json:"latest"`
	// Committed is false for a directory newer than the latest pointer
	// (renamed into place, but the crash came before the pointer moved).
	Committed bool  `json:"committed"`
	Bytes     int64 `json:"bytes"`
	// Meta is the manifest's training state (nil when it is unreadable).
	Meta    *Meta `json:"meta,omitempty"`
	Tensors int   `json:"tensors"`
	// Params is the number of parameter elements (optimizer state apart).
	Params int64 `json:"params"`
	// Verified is whether CRCs were checked; OK whether everything passed.
	Verified bool         `json:"verified"`
	OK       bool         `json:"ok"`
	Error    string       `json:"error,omitempty"`
	Files    []FileReport `json:"files,omitempty"`
}

// FileReport is one shard file's verification.
type FileReport struct {
	FileEntry
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Inspect describes the checkpoints in dir. With verify it checks every
// CRC of every checkpoint (reading all their bytes); otherwise it opens
// each manifest and checks file sizes and headers only. A checkpoint's
// problems go in its report, not in the error, which is only for a dir
// that cannot be listed.
func Inspect(fsys FS, dir string, verify bool) (*DirReport, error) {
	names, err := fsys.List(dir)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s does not exist", ErrNoCheckpoint, dir)
		}
		return nil, err
	}
	rep := &DirReport{Dir: dir, Latest: -1, OK: true}
	latest, lerr := readLatest(fsys, dir)
	if lerr != nil {
		rep.OK, rep.Error = false, lerr.Error()
	} else if latest != "" {
		rep.Latest, _ = ParseStepDir(latest)
		if !slices.Contains(names, latest) {
			rep.OK, rep.Error = false, fmt.Sprintf("%s names %s, which does not exist", filepath.Join(dir, LatestFile), latest)
		}
	}
	for _, n := range names {
		if isTemp(n) {
			rep.Leftovers = append(rep.Leftovers, n)
			continue
		}
		step, ok := ParseStepDir(n)
		if !ok {
			continue
		}
		cr := inspectOne(fsys, filepath.Join(dir, n), verify)
		cr.Name, cr.Step = n, step
		cr.Latest = n == latest
		cr.Committed = rep.Latest >= 0 && step <= rep.Latest
		if !cr.OK {
			rep.OK = false
		}
		rep.Checkpoints = append(rep.Checkpoints, cr)
	}
	slices.SortFunc(rep.Checkpoints, func(a, b CheckpointReport) int {
		switch {
		case a.Step < b.Step:
			return -1
		case a.Step > b.Step:
			return 1
		}
		return 0
	})
	return rep, nil
}

func inspectOne(fsys FS, path string, verify bool) CheckpointReport {
	cr := CheckpointReport{Verified: verify}
	c, err := openDir(fsys, path)
	if err != nil {
		cr.Error = err.Error()
		return cr
	}
	defer c.Close()
	m := c.Manifest
	meta := m.Meta
	cr.Meta, cr.Bytes, cr.Tensors = &meta, m.Bytes(), len(m.Tensors)
	for _, t := range m.Tensors {
		if isParam(t.Name) {
			n, _ := TensorSpec{DType: t.DType, Shape: t.Shape}.Bytes()
			cr.Params += n / int64(t.DType.Size())
		}
	}
	var sts []FileStatus
	if verify {
		sts = c.VerifyFiles()
	} else {
		for _, fe := range m.Files {
			sts = append(sts, FileStatus{FileEntry: fe, Err: c.files[fe.Name].err})
		}
	}
	cr.OK = true
	for _, st := range sts {
		fr := FileReport{FileEntry: st.FileEntry, OK: st.Err == nil}
		if st.Err != nil {
			fr.Error = st.Err.Error()
			cr.OK = false
		}
		cr.Files = append(cr.Files, fr)
	}
	return cr
}
