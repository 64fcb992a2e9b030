package checkpoint

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// StepDirName names the directory of step's checkpoint: "step-000123".
func StepDirName(step int64) string { return fmt.Sprintf("step-%06d", step) }

// ParseStepDir returns the step of a checkpoint directory name, accepting
// only the form StepDirName writes.
func ParseStepDir(name string) (int64, bool) {
	digits, ok := strings.CutPrefix(name, "step-")
	if !ok || len(digits) < 6 || len(digits) > 19 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	step, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || StepDirName(step) != name {
		return 0, false
	}
	return step, true
}

// tempMarker is in the name of every temporary directory or file of a
// commit, so that a later commit can tell crash leftovers from checkpoints.
const tempMarker = ".tmp-"

func isTemp(name string) bool { return strings.Contains(name, tempMarker) }

func nonce() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// TempDirName returns a fresh temporary directory name for step's
// checkpoint: "step-000123.tmp-1a2b3c4d". The random part keeps a retry
// from mixing its files with a crashed attempt's.
func TempDirName(step int64) string { return StepDirName(step) + tempMarker + nonce() }

// Latest returns the step that the latest pointer of dir names. It fails
// with ErrNoCheckpoint when there is no pointer (no checkpoint was ever
// committed there), and with ErrCorrupt when the pointer names no
// directory.
func Latest(fsys FS, dir string) (int64, error) {
	name, err := readLatest(fsys, dir)
	if err != nil {
		return 0, err
	}
	if name == "" {
		return 0, fmt.Errorf("%w in %s", ErrNoCheckpoint, dir)
	}
	step, _ := ParseStepDir(name)
	st, err := fsys.Stat(filepath.Join(dir, name))
	if err != nil || !st.IsDir() {
		return 0, fmt.Errorf("%w: %s names %s, which is not a directory", ErrCorrupt, filepath.Join(dir, LatestFile), name)
	}
	return step, nil
}

// readLatest returns the directory name in dir's latest pointer, "" when
// there is none.
func readLatest(fsys FS, dir string) (string, error) {
	path := filepath.Join(dir, LatestFile)
	b, err := readFile(fsys, path, 4096)
	if errors.Is(err, iofs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	name := strings.TrimSuffix(string(b), "\n")
	if _, ok := ParseStepDir(name); !ok {
		return "", fmt.Errorf("%w: %s holds %q, not a checkpoint directory name", ErrCorrupt, path, b)
	}
	return name, nil
}

// actionKind is one kind of file-system step of a commit.
type actionKind uint8

const (
	actWrite     actionKind = iota + 1 // create, write, fsync, close a file
	actRemove                          // remove a file
	actRemoveAll                       // remove a directory tree
	actRename                          // rename path to to
	actSyncDir                         // fsync a directory
)

// action is one step of a commit plan.
type action struct {
	kind     actionKind
	path, to string
	data     []byte
	// prune marks the steps after the commit point: their failure leaves
	// the new checkpoint committed.
	prune bool
}

func (a action) String() string {
	s := ""
	switch a.kind {
	case actWrite:
		s = fmt.Sprintf("write+fsync %s (%d bytes)", a.path, len(a.data))
	case actRemove:
		s = "remove " + a.path
	case actRemoveAll:
		s = "remove-all " + a.path
	case actRename:
		s = fmt.Sprintf("rename %s -> %s", a.path, a.to)
	case actSyncDir:
		s = "fsync-dir " + a.path
	}
	if a.prune {
		s += " (prune)"
	}
	return s
}

// commitInput is everything planCommit decides from: a pure function of it.
type commitInput struct {
	Dir, Tmp string
	Step     int64
	Manifest []byte
	// Entries are the names in Dir, TmpEntries those in Dir/Tmp, Latest
	// the name the latest pointer holds ("" for none).
	Entries, TmpEntries []string
	Latest              string
	Keep                int
	// Nonce makes the latest pointer's temporary name unique.
	Nonce string
}

// planCommit returns the steps that commit a temporary directory whose
// shard files are written and synced: manifest, directory fsync, rename
// into place, then the latest pointer by write-fsync-rename, and last the
// pruning of old checkpoints and crash leftovers. The commit point is the
// rename of the latest pointer: a crash before it leaves the previous
// checkpoint as latest, a crash after it the new one, and every step in
// between leaves both whole.
func planCommit(in commitInput) ([]action, error) {
	final := StepDirName(in.Step)
	if in.Latest == final {
		return nil, fmt.Errorf("%w: %s is already the latest checkpoint in %s", ErrCommitted, final, in.Dir)
	}
	tmp := filepath.Join(in.Dir, in.Tmp)
	var acts []action
	add := func(a action) { acts = append(acts, a) }
	add(action{kind: actWrite, path: filepath.Join(tmp, ManifestFile), data: in.Manifest})
	for _, n := range in.TmpEntries {
		if strings.HasPrefix(n, "part-") && strings.HasSuffix(n, ".json") {
			add(action{kind: actRemove, path: filepath.Join(tmp, n)})
		}
	}
	add(action{kind: actSyncDir, path: tmp})
	if slices.Contains(in.Entries, final) {
		// A directory of this step that latest does not name: written by a
		// run that crashed before its commit point, or an abandoned future
		// after a resume from an older step. Nothing points to it, so the
		// removal needs no fsync of its own: a crash may bring it back or
		// not, and the rename's fsync below covers both.
		acts = append(acts, removeTrees(in.Dir, []string{final}, in.Nonce, false)...)
	}
	add(action{kind: actRename, path: tmp, to: filepath.Join(in.Dir, final)})
	add(action{kind: actSyncDir, path: in.Dir})
	latestTmp := filepath.Join(in.Dir, LatestFile+tempMarker+in.Nonce)
	add(action{kind: actWrite, path: latestTmp, data: []byte(final + "\n")})
	add(action{kind: actRename, path: latestTmp, to: filepath.Join(in.Dir, LatestFile)})
	add(action{kind: actSyncDir, path: in.Dir})
	// Pruning needs no fsync of its own beyond the one in removeTrees: what
	// a crash brings back, the next commit removes again.
	acts = append(acts, removeTrees(in.Dir, selectPrune(in.Entries, in.Tmp, in.Step, in.Keep), in.Nonce, true)...)
	return acts, nil
}

// removeTrees returns the steps that remove the entries names of the
// checkpoint root dir. Removing a tree is many operations (a file at a
// time, as rm -r does), and a process killed halfway through would leave a
// step directory that looks like a checkpoint but lacks shards. So each
// checkpoint directory is first renamed, atomically, to a temporary name,
// which no reader takes for a checkpoint and the next commit removes if
// this one does not get to it; an fsync of dir makes the renames durable
// before any file in them goes, since a disk may otherwise keep the
// removals and lose the rename. Temporary leftovers are removed in place.
func removeTrees(dir string, names []string, nonce string, prune bool) []action {
	var renames, removes []action
	for _, n := range names {
		path := filepath.Join(dir, n)
		if isTemp(n) {
			removes = append(removes, action{kind: actRemoveAll, path: path, prune: prune})
			continue
		}
		trash := filepath.Join(dir, n+tempMarker+"trash-"+nonce)
		renames = append(renames, action{kind: actRename, path: path, to: trash, prune: prune})
		removes = append(removes, action{kind: actRemoveAll, path: trash, prune: prune})
	}
	if len(renames) > 0 {
		renames = append(renames, action{kind: actSyncDir, path: dir, prune: prune})
	}
	return append(renames, removes...)
}

// selectPrune returns the entries of the checkpoint root to remove once
// step is committed: temporary leftovers of crashed commits (any name with
// ".tmp-" but this commit's own), and, with keep > 0, checkpoints beyond the
// keep−1 newest below step, as well as any above step (an abandoned future
// after resuming from an older checkpoint). keep ≤ 0 keeps every
// checkpoint.
func selectPrune(entries []string, tmp string, step int64, keep int) []string {
	var out []string
	var older []int64
	for _, n := range entries {
		if isTemp(n) {
			if n != tmp {
				out = append(out, n)
			}
			continue
		}
		s, ok := ParseStepDir(n)
		if !ok || s == step || keep <= 0 {
			continue
		}
		if s > step {
			out = append(out, n)
		} else {
			older = append(older, s)
		}
	}
	slices.Sort(older)
	if drop := len(older) - (keep - 1); keep > 0 && drop > 0 {
		for _, s := range older[:drop] {
			out = append(out, StepDirName(s))
		}
	}
	slices.Sort(out)
	return out
}

// apply runs a commit plan. An error after the commit point wraps ErrPrune.
func apply(fsys FS, acts []action) error {
	for _, a := range acts {
		var err error
		switch a.kind {
		case actWrite:
			err = writeFileSync(fsys, a.path, a.data)
		case actRemove:
			err = fsys.Remove(a.path)
		case actRemoveAll:
			err = fsys.RemoveAll(a.path)
		case actRename:
			err = fsys.Rename(a.path, a.to)
		case actSyncDir:
			err = fsys.SyncDir(a.path)
		}
		if err != nil {
			if a.prune {
				return fmt.Errorf("%w: %s: %w", ErrPrune, a, err)
			}
			return fmt.Errorf("checkpoint commit: %s: %w", a, err)
		}
	}
	return nil
}

// BeginSave prepares dir for step's checkpoint: it creates dir if needed
// (durably), checks that step is not already the latest checkpoint
// (ErrCommitted), and creates a fresh temporary directory, whose name it
// returns. Every rank writes its shard file there (WriteShard), then the
// leader calls Commit.
func BeginSave(fsys FS, dir string, step int64) (string, error) {
	if err := mkdirAllDurable(fsys, dir); err != nil {
		return "", err
	}
	latest, err := readLatest(fsys, dir)
	if err != nil {
		return "", err
	}
	if latest == StepDirName(step) {
		return "", fmt.Errorf("%w: %s is already the latest checkpoint in %s", ErrCommitted, latest, dir)
	}
	tmp := TempDirName(step)
	if err := fsys.MkdirAll(filepath.Join(dir, tmp)); err != nil {
		return "", err
	}
	return tmp, nil
}

// mkdirAllDurable creates dir and the missing directories above it, and
// fsyncs the parent of each it created, so that a checkpoint committed in
// a new directory survives a crash.
func mkdirAllDurable(fsys FS, dir string) error {
	var missing []string
	for d := filepath.Clean(dir); !exists(fsys, d); d = parentDir(d) {
		missing = append(missing, d)
		if parentDir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(parentDir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// CommitOptions tune Commit.
type CommitOptions struct {
	// Keep is the number of committed checkpoints to keep, this one
	// included; 0 keeps all.
	Keep int
}

// Commit makes the checkpoint in dir/tmp, whose shard files every rank has
// written and synced, the latest: it writes manifest.json, fsyncs the
// temporary directory, renames it to step-NNNNNN, fsyncs dir, replaces the
// latest pointer atomically (write, fsync, rename, fsync dir), and then
// prunes. It first checks that each shard file is there with the size its
// rank reported. An error wrapping ErrPrune means the checkpoint is
// committed and only the clean-up failed.
func Commit(fsys FS, dir, tmp string, m *Manifest, o CommitOptions) error {
	tmpPath := filepath.Join(dir, tmp)
	for _, f := range m.Files {
		path := filepath.Join(tmpPath, f.Name)
		st, err := fsys.Stat(path)
		if err != nil {
			return fmt.Errorf("%w: shard %s: %v", ErrCorrupt, path, err)
		}
		if st.Size() != f.Bytes {
			return fmt.Errorf("%w: shard %s is %d bytes, its rank wrote %d", ErrCorrupt, path, st.Size(), f.Bytes)
		}
	}
	b, err := EncodeManifest(m)
	if err != nil {
		return err
	}
	entries, err := fsys.List(dir)
	if err != nil {
		return err
	}
	tmpEntries, err := fsys.List(tmpPath)
	if err != nil {
		return err
	}
	latest, err := readLatest(fsys, dir)
	if err != nil {
		return err
	}
	acts, err := planCommit(commitInput{Dir: dir, Tmp: tmp, Step: m.Step, Manifest: b, Entries: entries,
		TmpEntries: tmpEntries, Latest: latest, Keep: o.Keep, Nonce: nonce()})
	if err != nil {
		return err
	}
	return apply(fsys, acts)
}

// Prune removes, from dir, crash leftovers and the checkpoints beyond the
// keep newest up to the latest (see CommitOptions.Keep); Commit does it
// after every commit. It must not run while a save is in flight, whose
// temporary directory it would remove.
func Prune(fsys FS, dir string, keep int) error {
	latest, err := readLatest(fsys, dir)
	if err != nil || latest == "" {
		return err
	}
	step, _ := ParseStepDir(latest)
	entries, err := fsys.List(dir)
	if err != nil {
		return err
	}
	return apply(fsys, removeTrees(dir, selectPrune(entries, "", step, keep), nonce(), true))
}
