package actors

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/collective"
	"github.com/troupe-ml/troupe/internal/shmem"
)

// The multi-process tests start this test binary again as the ranks: with
// TROUPE_ACTORS_CHILD set, init runs a rank and exits before any test runs.
// Parent and child talk over the child's stdin and stdout, one JSON object
// per line (see childLine).

const childEnv = "TROUPE_ACTORS_CHILD"

type childLine struct {
	Rank  int      `json:"rank"`
	Addr  string   `json:"addr,omitempty"`
	Addrs []string `json:"addrs,omitempty"`
	Hash  uint64   `json:"hash,omitempty"`
	First float32  `json:"first,omitempty"`
	Err   string   `json:"err,omitempty"`
	Msg   string   `json:"msg,omitempty"`
	ElapS float64  `json:"elapsed_s,omitempty"`
	// Refs is how many data frames the rank sent by reference to its
	// registered memory.
	Refs int64 `json:"refs,omitempty"`
}

func init() {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	// spec: scenario,transport,rank,size
	f := strings.Split(spec, ",")
	rank, _ := strconv.Atoi(f[2])
	size, _ := strconv.Atoi(f[3])
	err := runChild(f[0], Transport(f[1]), rank, size, os.Stdin, os.Stdout)
	if err != nil {
		json.NewEncoder(os.Stdout).Encode(childLine{Rank: rank, Err: err.Error()})
		os.Exit(1)
	}
	os.Exit(0)
}

// childInput is rank r's deterministic buffer for operation k.
func childInput(r, k, n int) []float32 {
	b := make([]float32, n)
	for i := range b {
		b[i] = float32(math.Sin(float64(1+r)*1.7+float64(k)*0.3+float64(i)*0.011)) * float32(1+r)
	}
	return b
}

// childBuf is where a rank reduces in: registered memory where the
// transport reads it in place (shm, auto), as a trainer's gradients are.
func childBuf(c collective.Communicator, in []float32) ([]float32, error) {
	if !collective.ReadsRegisteredMemory(c) {
		return in, nil
	}
	b, err := shmem.Alloc(len(in))
	if err != nil {
		return nil, err
	}
	copy(b, in)
	return b, nil // freed when the process ends
}

func hashBits(b []float32) uint64 {
	h := fnv.New64a()
	for _, v := range b {
		u := math.Float32bits(v)
		h.Write([]byte{byte(u), byte(u >> 8), byte(u >> 16), byte(u >> 24)})
	}
	return h.Sum64()
}

func runChild(scenario string, tr Transport, rank, size int, stdin io.Reader, stdout io.Writer) error {
	enc := json.NewEncoder(stdout)
	sc := DefaultSystemConfig()
	sc.Remote = true
	sys, err := NewSystem(sc)
	if err != nil {
		return err
	}
	// The system is not closed: the process ends instead. protoactor's
	// graceful remote shutdown has a data race of its own (it writes the
	// endpoint reader's suspended flag that gRPC goroutines read), which
	// the race detector would report in these children.
	enc.Encode(childLine{Rank: rank, Addr: sys.Address()})
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return err
	}
	var l childLine
	if err := json.Unmarshal(line, &l); err != nil {
		return err
	}
	cfg := DefaultCommConfig()
	cfg.Transport = tr
	cfg.Collective.SubChunkBytes = 64 << 10
	cfg.Collective.Timeout = time.Minute // failure signals must act, not the timeout
	comm, err := StartRemote(sys, RemoteWorld{Rank: rank, Addrs: l.Addrs}, cfg)
	if err != nil {
		return err
	}
	defer comm.Close()
	ctx := context.Background()
	switch scenario {
	case "reduce":
		for k, n := range []int{1, 1000, 300_001} {
			b, err := childBuf(comm, childInput(rank, k, n))
			if err != nil {
				return err
			}
			if err := comm.AllReduce(ctx, b, collective.Sum).Wait(); err != nil {
				return err
			}
			enc.Encode(childLine{Rank: rank, Hash: hashBits(b), First: b[0], Refs: refFrames.Load()})
		}
	case "kill":
		if rank == size-1 {
			enc.Encode(childLine{Rank: rank, Msg: "waiting to be killed"})
			select {}
		}
		b, err := childBuf(comm, childInput(rank, 0, 100_000))
		if err != nil {
			return err
		}
		start := time.Now()
		err = comm.AllReduce(ctx, b, collective.Sum).Wait()
		msg := "no error"
		if err != nil {
			msg = err.Error()
		}
		if !errors.Is(err, collective.ErrPeerLost) {
			return fmt.Errorf("want a lost peer, got: %s", msg)
		}
		enc.Encode(childLine{Rank: rank, Msg: msg, ElapS: time.Since(start).Seconds()})
		survivors := make([]int, size-1)
		for i := range survivors {
			survivors[i] = i
		}
		g, err := comm.Group(survivors)
		if err != nil {
			return err
		}
		if b, err = childBuf(comm, childInput(rank, 1, 5000)); err != nil {
			return err
		}
		if err := g.AllReduce(ctx, b, collective.Sum).Wait(); err != nil {
			return err
		}
		enc.Encode(childLine{Rank: rank, Hash: hashBits(b), First: b[0], Refs: refFrames.Load()})
	}
	// wait for the parent's go-ahead: leaving now could cut another rank's
	// last message
	io.Copy(io.Discard, in)
	return nil
}

type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *json.Decoder
}

// startChildren starts P ranks of scenario and introduces them to each
// other. They are killed when the test ends.
func startChildren(t *testing.T, scenario string, tr Transport, P int) []*childProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	kids := make([]*childProc, P)
	t.Cleanup(func() {
		cancel()
		for _, k := range kids {
			if k != nil {
				k.stdin.Close()
				k.cmd.Wait()
			}
		}
	})
	addrs := make([]string, P)
	for r := range kids {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%d", childEnv, scenario, tr, r, P))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kids[r] = &childProc{cmd: cmd, stdin: stdin, out: json.NewDecoder(stdout)}
		addrs[r] = readChild(t, kids[r], r).Addr
	}
	msg, _ := json.Marshal(childLine{Addrs: addrs})
	for _, k := range kids {
		k.stdin.Write(append(msg, '\n'))
	}
	return kids
}

func readChild(t *testing.T, k *childProc, r int) childLine {
	t.Helper()
	var l childLine
	if err := k.out.Decode(&l); err != nil {
		t.Fatalf("rank %d: %v", r, err)
	}
	if l.Err != "" {
		t.Fatalf("rank %d: %s", r, l.Err)
	}
	return l
}

func finishChildren(t *testing.T, kids []*childProc) {
	t.Helper()
	for _, k := range kids {
		if k != nil {
			k.stdin.Close()
		}
	}
	for r, k := range kids {
		if k != nil {
			if err := k.cmd.Wait(); err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
}

// TestMultiProcessAllReduce: one OS process per rank on loopback, over both
// cross-process transports: every rank ends with the same bits, equal to a
// float64 sum within float32 summation error.
func TestMultiProcessAllReduce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tr := range []Transport{TransportTCP, TransportShm, TransportAuto, TransportActor} {
		t.Run(string(tr), func(t *testing.T) {
			const P = 3
			kids := startChildren(t, "reduce", tr, P)
			for k, n := range []int{1, 1000, 300_001} {
				var hash uint64
				for r, kid := range kids {
					l := readChild(t, kid, r)
					if r == 0 {
						hash = l.Hash
					} else if l.Hash != hash {
						t.Fatalf("op %d: rank %d's result differs from rank 0's", k, r)
					}
					var want, mag float64
					for q := 0; q < P; q++ {
						v := float64(childInput(q, k, n)[0])
						want += v
						mag += math.Abs(v)
					}
					// P terms: (P−1)·2⁻²⁴·Σ|x| at most; we allow P·2⁻²³·Σ|x|.
					if math.Abs(float64(l.First)-want) > float64(P)*math.Ldexp(mag, -23)+1e-30 {
						t.Fatalf("op %d rank %d: %v, want %v", k, r, l.First, want)
					}
					// the ring of the last operation: over shared memory
					// the chunks went by reference to the registered buffer
					if k == 2 && (l.Refs > 0) != (tr == TransportShm || tr == TransportAuto) {
						t.Fatalf("%s rank %d: %d data frames sent by reference", tr, r, l.Refs)
					}
				}
			}
			finishChildren(t, kids)
		})
	}
}

// devShm lists /dev/shm (empty where there is none).
func devShm(t *testing.T) []string {
	t.Helper()
	es, err := os.ReadDir("/dev/shm")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestMultiProcessKilledRank: SIGKILL one rank's process while the others
// are inside an operation: both survivors fail at once with an error naming
// it (the failure signal, not the one-minute timeout), then reduce in a
// group without it.
func TestMultiProcessKilledRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, tr := range []Transport{TransportTCP, TransportShm, TransportAuto, TransportActor} {
		t.Run(string(tr), func(t *testing.T) {
			const P = 3
			shmBefore := devShm(t)
			kids := startChildren(t, "kill", tr, P)
			readChild(t, kids[P-1], P-1) // it is up and waiting
			time.Sleep(200 * time.Millisecond)
			if err := kids[P-1].cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			kids[P-1].cmd.Wait()
			kids[P-1] = nil
			for r := 0; r < P-1; r++ {
				l := readChild(t, kids[r], r)
				if !strings.Contains(l.Msg, fmt.Sprintf("rank %d", P-1)) {
					t.Fatalf("rank %d: %q does not name rank %d", r, l.Msg, P-1)
				}
				if l.ElapS > 30 {
					t.Fatalf("rank %d learned after %.1f s", r, l.ElapS)
				}
				t.Logf("%s: rank %d failed %.3f s after entering the all-reduce (the kill came 0.2 s or more in)", tr, r, l.ElapS)
			}
			// shared memory: the killed rank's regions and sockets have
			// no names, so nothing of it is left in /dev/shm
			if after := devShm(t); !slices.Equal(after, shmBefore) {
				t.Fatalf("/dev/shm held %v before, %v after the kill", shmBefore, after)
			}
			var hash uint64
			for r := 0; r < P-1; r++ {
				l := readChild(t, kids[r], r)
				if r == 0 {
					hash = l.Hash
				} else if l.Hash != hash {
					t.Fatal("survivors disagree")
				}
			}
			finishChildren(t, kids)
		})
	}
}
