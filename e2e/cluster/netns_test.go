//go:build long

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// testNet is a set of test hosts on one machine: network namespaces made
// for one test, each linked by a veth pair to a router namespace that
// forwards between them. Host i (0-based) has address 10.78.(i+1).2; the
// router 10.78.(i+1).1. Faults are the router's: a cut host's packets and
// the packets to it are dropped silently (blackhole rules, as a lost link
// or a dead switch port does, no reset, no ICMP), a split drops what
// crosses between two groups, an impaired host's packets pass a delay
// line (package internal/netemu: delay and random loss; the kernels here
// have no sch_netem), and a limited host's link is capped by tc's tbf. Every address exists only inside these namespaces,
// and they are removed when the test ends.
type testNet struct {
	t      *testing.T
	tag    string
	router string
	hosts  []string
	// rules are the router's fault rules in force, by the fault's key.
	rules map[string][]string
	lines int // delay lines started
}

var netSeq atomic.Int64

// newTestNet makes n test hosts, or skips the test saying why it cannot
// (not root, no `ip`, no network namespaces).
func newTestNet(t *testing.T, n int) *testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("test hosts in network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("test hosts in network namespaces need `ip` (iproute2)")
	}
	tn := &testNet{t: t, tag: fmt.Sprintf("tt%d-%d", os.Getpid()%100000, netSeq.Add(1)), rules: map[string][]string{}}
	tn.router = tn.tag + "-r"
	if out, err := exec.Command("ip", "netns", "add", tn.router).CombinedOutput(); err != nil {
		t.Skipf("cannot make network namespaces here: %v: %s", err, out)
	}
	t.Cleanup(tn.remove)
	tn.ip("netns", "exec", tn.router, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
	tn.ip("-n", tn.router, "link", "set", "lo", "up")
	for i := range n {
		h := fmt.Sprintf("%s-h%d", tn.tag, i+1)
		tn.ip("netns", "add", h)
		tn.hosts = append(tn.hosts, h)
		r := fmt.Sprintf("r%d", i+1)
		tn.ip("-n", tn.router, "link", "add", r, "type", "veth", "peer", "name", "eth0", "netns", h)
		tn.ip("-n", tn.router, "addr", "add", fmt.Sprintf("10.78.%d.1/24", i+1), "dev", r)
		tn.ip("-n", tn.router, "link", "set", r, "up")
		tn.ip("-n", h, "addr", "add", fmt.Sprintf("10.78.%d.2/24", i+1), "dev", "eth0")
		tn.ip("-n", h, "link", "set", "eth0", "up")
		tn.ip("-n", h, "link", "set", "lo", "up")
		tn.ip("-n", h, "route", "add", "default", "via", fmt.Sprintf("10.78.%d.1", i+1))
	}
	return tn
}

// ip runs `ip args…`, failing the test on an error.
func (tn *testNet) ip(args ...string) {
	tn.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		tn.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// addr is host i's address.
func (tn *testNet) addr(i int) string { return fmt.Sprintf("10.78.%d.2", i+1) }

// command runs name with args in host i.
func (tn *testNet) command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", tn.hosts[i], name}, args...)...)
}

// rule adds router rules under key (each an `ip rule add` argument list
// without the priority), removed by heal(key).
func (tn *testNet) rule(key string, rules ...[]string) {
	tn.t.Helper()
	for _, r := range rules {
		tn.ip(append([]string{"-n", tn.router, "rule", "add", "priority", "100"}, r...)...)
		tn.rules[key] = append(tn.rules[key], strings.Join(r, " "))
	}
}

// cut drops every packet from and to host i.
func (tn *testNet) cut(i int) {
	tn.rule(fmt.Sprintf("cut %d", i), []string{"iif", fmt.Sprintf("r%d", i+1), "blackhole"},
		[]string{"to", fmt.Sprintf("10.78.%d.0/24", i+1), "blackhole"})
}

// split drops every packet between the hosts of group and the others.
func (tn *testNet) split(group ...int) {
	in := map[int]bool{}
	for _, g := range group {
		in[g] = true
	}
	var rules [][]string
	for a := range tn.hosts {
		for b := range tn.hosts {
			if in[a] != in[b] {
				rules = append(rules, []string{"iif", fmt.Sprintf("r%d", a+1), "to", fmt.Sprintf("10.78.%d.0/24", b+1), "blackhole"})
			}
		}
	}
	tn.rule(fmt.Sprintf("split %v", group), rules...)
}

// heal removes the rules of every fault.
func (tn *testNet) heal() {
	tn.t.Helper()
	for key, rules := range tn.rules {
		for _, r := range rules {
			tn.ip(append([]string{"-n", tn.router, "rule", "del", "priority", "100"}, strings.Fields(r)...)...)
		}
		delete(tn.rules, key)
	}
}

// impair sends every packet host i sends through a delay line in the
// router: delay, and loss (0 to 1) of the packets at random. Packets to
// host i are not impaired (one-way): impair both ends of a path for both
// directions. The returned function ends the impairment (packets already
// in the line still come out late).
func (tn *testNet) impair(i int, delay time.Duration, loss float64) (end func()) {
	tn.t.Helper()
	tn.lines++
	dev, table := fmt.Sprintf("tun%d", tn.lines), fmt.Sprint(100+tn.lines)
	tn.ip("-n", tn.router, "tuntap", "add", "dev", dev, "mode", "tun")
	tn.ip("-n", tn.router, "link", "set", dev, "up")
	tn.ip("-n", tn.router, "route", "add", "default", "dev", dev, "table", table)
	cmd := exec.Command("ip", "netns", "exec", tn.router, delayLineBin(tn.t), "--dev", dev, "--delay", delay.String(), "--loss", fmt.Sprint(loss))
	log, err := os.Create(filepath.Join(tn.t.TempDir(), dev+".log"))
	if err != nil {
		tn.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		tn.t.Fatal(err)
	}
	tn.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
	rule := []string{"priority", "200", "iif", fmt.Sprintf("r%d", i+1), "table", table}
	tn.ip(append([]string{"-n", tn.router, "rule", "add"}, rule...)...)
	return func() { tn.ip(append([]string{"-n", tn.router, "rule", "del"}, rule...)...) }
}

// limit caps host i's link at rate (tc's units: 20mbit) both ways, with
// tc's token bucket filter on the host's end and the router's (at most
// 100 ms of queue: beyond it packets are dropped, as a switch does).
func (tn *testNet) limit(i int, rate string) {
	tn.t.Helper()
	if _, err := exec.LookPath("tc"); err != nil {
		tn.t.Skip("a bandwidth limit needs `tc` (iproute2)")
	}
	for _, at := range [][2]string{{tn.hosts[i], "eth0"}, {tn.router, fmt.Sprintf("r%d", i+1)}} {
		if out, err := exec.Command("ip", "netns", "exec", at[0], "tc", "qdisc", "add", "dev", at[1], "root", "tbf",
			"rate", rate, "burst", "32kb", "latency", "100ms").CombinedOutput(); err != nil {
			tn.t.Fatalf("tc tbf on %s %s: %v: %s", at[0], at[1], err, out)
		}
	}
}

// remove ends every process in the test's namespaces and deletes them.
func (tn *testNet) remove() {
	for _, ns := range append(append([]string{}, tn.hosts...), tn.router) {
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				exec.Command("kill", "-9", pid).Run()
			}
		}
		exec.Command("ip", "netns", "del", ns).Run()
	}
}

// buildDelayLine builds the delay line command once for the package.
var buildDelayLine = sync.OnceValues(func() (string, error) {
	path := filepath.Join(filepath.Dir(e2etest.Bin), "delayline")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/troupe-ml/troupe/internal/netemu/cmd/delayline").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the delay line: %v: %s", err, out)
	}
	return path, nil
})

// delayLineBin is the delay line command, built on first use.
func delayLineBin(t *testing.T) string {
	t.Helper()
	path, err := buildDelayLine()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// newNetCluster is newCluster with agent i on test host i, gossiping on
// port 7101 of its own address.
func newNetCluster(t *testing.T, nodes, minNodes int) (*cluster, *testNet) {
	return newNetClusterPerHost(t, nodes, 1, minNodes)
}

// newNetClusterPerHost is newNetCluster with perHost agents on each of
// hosts test hosts (agent i on host i/perHost, gossiping on port 7101 + i
// mod perHost of its address): processes that share a host, as one per GPU.
func newNetClusterPerHost(t *testing.T, hosts, perHost, minNodes int) (*cluster, *testNet) {
	tn := newTestNet(t, hosts)
	c := newCluster(t, hosts*perHost, minNodes)
	c.net, c.perHost = tn, perHost
	for i := range c.ports {
		c.ports[i] = fmt.Sprintf("%s:%d", tn.addr(i/perHost), 7101+i%perHost)
	}
	return c, tn
}
