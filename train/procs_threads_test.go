package train

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestProcThreads: worker processes split the cores unless --threads says.
func TestProcThreads(t *testing.T) {
	for _, c := range []struct{ cores, procs, threads, want int }{
		{2, 1, 0, 2},
		{2, 2, 0, 1},
		{16, 4, 0, 4},
		{16, 3, 0, 5},
		{2, 4, 0, 1}, // more processes than cores: one thread each
		{8, 0, 0, 8},
		{2, 2, 3, 3}, // --threads is each process's, oversubscribed if asked
	} {
		if got := procThreads(c.cores, c.procs, c.threads); got != c.want {
			t.Errorf("procThreads(cores %d, procs %d, threads %d) = %d, want %d", c.cores, c.procs, c.threads, got, c.want)
		}
	}
}

// TestWorkerProcessGetsItsThreads: a launched worker process sees the
// GOMAXPROCS of its share, which its kernels take (threadsPerWorker with
// Threads 0), and --threads where it is set.
func TestWorkerProcessGetsItsThreads(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		procs int
		want  int
	}{
		{Config{}, 2, max(1, runtime.GOMAXPROCS(0)/2)},
		{Config{}, 1, runtime.GOMAXPROCS(0)},
		{Config{MeshConfig: MeshConfig{Threads: 3}}, 2, 3},
	} {
		out := &lockedBuffer{}
		wp := workerProcs{argv: []string{"sh", "-c", `echo "$GOMAXPROCS"`}, out: out}
		procs := &rankProcs{wp: wp}
		lost := make(chan string, 1)
		if err := procs.launch(withThreads(os.Environ(), &c.cfg, c.procs), 1, func(_ int, cause string) { lost <- cause }); err != nil {
			t.Fatal(err)
		}
		<-lost
		procs.stop()
		got, err := strconv.Atoi(strings.TrimSpace(out.String()))
		if err != nil || got != c.want {
			t.Errorf("threads %d, %d procs: the worker process has GOMAXPROCS %q, want %d", c.cfg.Threads, c.procs, out.String(), c.want)
		}
	}
	// In the worker process, Threads 0 means GOMAXPROCS, which the
	// environment above set.
	if got := threadsPerWorker(&Config{}, 1); got != runtime.GOMAXPROCS(0) {
		t.Fatalf("threadsPerWorker = %d, want GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
}

// lockedBuffer collects a child's output (written by exec's copying
// goroutine, read after it is done).
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
