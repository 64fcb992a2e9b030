package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	htmlpkg "html"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// chromiumBin is Debian's chromium, or "" (the browser tests skip).
func chromiumBin() string {
	for _, n := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// chromium runs headless Chromium on a fresh profile with args.
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=5000"}
	out, err := exec.CommandContext(ctx, chromiumBin(), append(base, args...)...).Output()
	if err != nil {
		t.Fatalf("chromium %v: %v", args, err)
	}
	return out
}

// troupe train --report writes one HTML file that headless Chromium opens
// with no error on its console, every chart drawn (its canvases hold
// pixels): loss, learning rate, gradient norm (--clip), throughput, step
// time, stragglers (a slow rank made by TROUPE_TEST_STRAGGLER), compute
// per rank, membership, checkpoints, memory; with --trace the pipeline's
// timeline too. A screenshot of it is not blank.
func TestReportOpensInABrowser(t *testing.T) {
	if chromiumBin() == "" {
		t.Skip("no chromium: the browser test needs Debian's chromium (apt-get install chromium)")
	}
	dir := t.TempDir()
	runs := []struct {
		name   string
		args   []string
		charts int
	}{
		{"dp2", []string{"--dp", "2", "--eval-every", "10", "--clip", "1", "--ckpt-dir", filepath.Join(dir, "ckpt"), "--ckpt-every", "10"}, 10},
		{"pp2", []string{"--pp", "2", "--micro-batches", "2", "--trace", filepath.Join(dir, "t.json")}, 8},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			html := filepath.Join(dir, r.name+".html")
			args := append([]string{"train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--steps", "40",
				"--threads", "1", "--report", html, "--log-level", "warn"}, r.args...)
			cmd := exec.Command(e2etest.Bin, args...)
			cmd.Env = append(os.Environ(), "TROUPE_TEST_STRAGGLER=1:5ms")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			p := openReport(t, html)
			if len(p.colors) < r.charts {
				t.Fatalf("%d charts drawn, want at least %d", len(p.colors), r.charts)
			}
			if !strings.Contains(p.dom, "<td>troupe train</td>") {
				t.Error("the report does not give the run's settings (read from troupe train)")
			}
			t.Logf("%d charts drawn", len(p.colors))
		})
	}
}

// troupe report A B compares runs: each run is a line of its own colour
// in each of the six charts (loss, held-out loss, throughput, step time,
// learning rate, gradient norm), named in every chart's legend by its
// --label, and the settings give the configuration --config read from
// the first run's checkpoints (none for the second).
func TestReportComparesRunsInABrowser(t *testing.T) {
	if chromiumBin() == "" {
		t.Skip("no chromium: the browser test needs Debian's chromium (apt-get install chromium)")
	}
	dir := t.TempDir()
	a, b, ck := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), filepath.Join(dir, "ckpt")
	train := []string{"train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--threads", "1",
		"--eval-every", "10", "--clip", "1", "--log-level", "warn"}
	e2etest.Troupe(t, 2*time.Minute, slices.Concat(train, []string{"--steps", "40", "--dp", "2", "--metrics-out", a, "--ckpt-dir", ck, "--ckpt-every", "20"})...)
	e2etest.Troupe(t, 2*time.Minute, slices.Concat(train, []string{"--steps", "30", "--lr", "0.1", "--metrics-out", b})...)
	html := filepath.Join(dir, "compare.html")
	e2etest.Troupe(t, time.Minute, "report", a, b, "--label", "dp 2", "--label", "lr 0.1", "--config", ck, "--config", "", "-o", html, "--log-level", "warn")

	p := openReport(t, html)
	charts := []string{"Loss", "Held-out loss", "Throughput", "Step time", "Learning rate", "Gradient norm"}
	if len(p.colors) != len(charts) {
		t.Fatalf("%d charts, want %d (%q)", len(p.colors), len(charts), charts)
	}
	for i, c := range charts {
		if !strings.Contains(p.dom, "<h2>"+c+"</h2>") {
			t.Errorf("no %s chart", c)
		}
		// The runs' colours are the palette's first two.
		if !slices.Contains(p.colors[i], 0) || !slices.Contains(p.colors[i], 1) {
			t.Errorf("the %s chart shows the colours %v: want both runs' lines (0 and 1)", c, p.colors[i])
		}
	}
	for _, label := range []string{"dp 2", "lr 0.1"} {
		if n := strings.Count(p.dom, `<div class="u-label">`+label+`</div>`); n != len(charts) {
			t.Errorf("%q is in %d charts' legends, want %d", label, n, len(charts))
		}
	}
	for _, want := range []string{`<th scope="row">learning rate</th><td>0.05</td><td>—</td>`,
		`<th scope="row">parallelism</th><td>dp 2 × pp 1 × tp 1</td><td>—</td>`,
		`<th scope="row">world</th><td>2</td><td>1</td>`} {
		if !strings.Contains(p.dom, want) {
			t.Errorf("the settings lack %s", want)
		}
	}
}

// reportPage is what headless Chromium made of a report: the DOM after
// its scripts ran, and for each canvas the indices of the palette's
// colours it shows.
type reportPage struct {
	dom    string
	colors [][]int
}

// openReport opens the report at html in headless Chromium and fails the
// test when its page logged an error, a canvas holds no drawing, or a
// screenshot of it is blank.
func openReport(t *testing.T, html string) reportPage {
	t.Helper()
	dom := chromium(t, "--dump-dom", "file://"+html)
	body := regexp.MustCompile(`<body[^>]*>`).Find(dom)
	if m := regexp.MustCompile(`data-errors="([^"]*)"`).FindSubmatch(body); m != nil {
		t.Fatalf("errors in the page: %s", m[1])
	}
	drawn := regexp.MustCompile(`data-drawn="(\d+)" data-charts="(\d+)" data-colors="([^"]*)"`).FindSubmatch(body)
	if drawn == nil {
		t.Fatalf("the page did not report its charts: %s", body)
	}
	d, _ := strconv.Atoi(string(drawn[1]))
	n, _ := strconv.Atoi(string(drawn[2]))
	if n == 0 || d != n {
		t.Fatalf("%d of %d charts drawn, want all", d, n)
	}
	p := reportPage{dom: string(dom)}
	for _, c := range strings.Split(string(drawn[3]), " ") {
		var idx []int
		for _, k := range strings.Split(c, ",") {
			if v, err := strconv.Atoi(k); err == nil {
				idx = append(idx, v)
			}
		}
		p.colors = append(p.colors, idx)
	}
	if len(p.colors) != n {
		t.Fatalf("colours of %d canvases for %d charts: %q", len(p.colors), n, drawn[3])
	}
	shot := strings.TrimSuffix(html, ".html") + ".png"
	chromium(t, "--window-size=1280,2400", "--screenshot="+shot, "file://"+html)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if !inked(img) {
		t.Fatal("the screenshot is blank")
	}
	return p
}

// inked reports whether img has a pixel that is not white.
func inked(img image.Image) bool {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			if r, g, bl, _ := img.At(x, y).RGBA(); r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				return true
			}
		}
	}
	return false
}

// A language model's report shows text the trained model wrote: the start
// of a held-out sequence of the Go specification as the prompt and the
// model's greedy continuation to the end of its context, decoded with the
// data's tokenizer (one character a token), after two data-parallel
// replicas trained it. A classifier's report has no text.
func TestReportShowsTheModelsText(t *testing.T) {
	dir := t.TempDir()
	html := filepath.Join(dir, "gpt.html")
	e2etest.Troupe(t, 2*time.Minute, "train", "--model", "gpt", "--d-model", "32", "--n-layers", "1", "--context", "32",
		"--batch", "8", "--steps", "20", "--dp", "2", "--threads", "1", "--report", html, "--log-level", "warn")
	page := e2etest.ReadFile(t, html)
	m := regexp.MustCompile(`(?s)<p class="note">After step (\d+), from the start of a sequence of ([^ ]+) \(greedy\)[^<]*</p>\s*<pre class="sample"><span class="prompt">(.*?)</span>(.*?)</pre>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the report shows no text of the model:\n%s", page[:min(len(page), 3000)])
	}
	prompt, text := htmlpkg.UnescapeString(m[3]), htmlpkg.UnescapeString(m[4])
	if m[1] != "20" || m[2] != "gospec/test" {
		t.Errorf("the sample is of step %s from %s; want step 20 from gospec/test", m[1], m[2])
	}
	if n, k := utf8.RuneCountInString(prompt), utf8.RuneCountInString(text); n != 16 || k != 16 {
		t.Errorf("prompt %q (%d characters) and text %q (%d): want 16 and 16, half the context each", prompt, n, text, k)
	}
	if !strings.Contains(goSpec(t), prompt) {
		t.Errorf("the prompt %q is not text of the Go specification", prompt)
	}
	t.Logf("the model wrote %q after %q", text, prompt)
	if chromiumBin() != "" {
		openReport(t, html) // the page with its text opens without an error
	}

	mlp := filepath.Join(dir, "mlp.html")
	e2etest.Troupe(t, 2*time.Minute, "train", "--model", "mlp", "--layers", "784,16,10", "--data", "synthetic-mlp", "--steps", "5",
		"--threads", "1", "--report", mlp, "--log-level", "warn")
	if strings.Contains(e2etest.ReadFile(t, mlp), `class="sample"`) {
		t.Error("a classifier's report shows text")
	}
}

// goSpec is the Go specification's text, as the gospec data reads it.
func goSpec(t *testing.T) string {
	t.Helper()
	gz, err := os.ReadFile("../data/gospec/go_spec.html.gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
