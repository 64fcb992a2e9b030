package e2etest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scrape reads url's body (an empty string while nothing answers).
func Scrape(url string) (int, string) {
	res, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// Sample is the value of the first Sample of name (with its labels, if
// any) in a Prometheus text exposition, or -1.
func Sample(body, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return -1
	}
	return v
}

// WaitMetrics scrapes url until ok accepts the body, for up to a minute.
func WaitMetrics(t *testing.T, url string, ok func(string) bool) string {
	t.Helper()
	var body string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if code, b := Scrape(url); code == http.StatusOK {
			if body = b; ok(b) {
				return b
			}
		}
	}
	t.Fatalf("%s never showed what was waited for; last Scrape:\n%s", url, body)
	return ""
}

// PromtoolCheck runs promtool check metrics on a Scrape when the machine
// has it (.ci/run installs Debian's prometheus package).
func PromtoolCheck(t *testing.T, body string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not installed: the exposition's lint is skipped (apt-get install prometheus)")
		return
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// AsyncLine is a metrics line of asynchronous training.
type AsyncLine struct {
	Step   int     `json:"step"`
	Loss   float64 `json:"loss"`
	Cursor uint64  `json:"cursor"`
	Async  *struct {
		Staleness int `json:"staleness"`
		Replica   int `json:"replica"`
	} `json:"async"`
}

// Field is field of every JSON line of jsonl (a metrics file), as numbers.
func Field(t *testing.T, jsonl string, field string) []float64 {
	t.Helper()
	var out []float64
	sc := bufio.NewScanner(strings.NewReader(jsonl))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		out = append(out, m[field].(float64))
	}
	return out
}

// ReadFile is the file at path; an error fails the test.
func ReadFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
