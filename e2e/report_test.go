package e2e

import (
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
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
// pixels): loss, throughput, step time, stragglers (a slow rank made by
// TROUPE_TEST_STRAGGLER), compute per rank, membership, checkpoints,
// memory; with --trace the pipeline's timeline too. A screenshot of it is not blank.
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
		{"dp2", []string{"--dp", "2", "--eval-every", "10", "--ckpt-dir", filepath.Join(dir, "ckpt"), "--ckpt-every", "10"}, 8},
		{"pp2", []string{"--pp", "2", "--micro-batches", "2", "--trace", filepath.Join(dir, "t.json")}, 7},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			html := filepath.Join(dir, r.name+".html")
			args := append([]string{"train", "--model", "mlp", "--layers", "784,64,10", "--data", "synthetic-mlp", "--steps", "40",
				"--threads", "1", "--report", html, "--log-level", "warn"}, r.args...)
			cmd := exec.Command(troupeBin, args...)
			cmd.Env = append(os.Environ(), "TROUPE_TEST_STRAGGLER=1:5ms")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			dom := chromium(t, "--dump-dom", "file://"+html)
			body := regexp.MustCompile(`<body[^>]*>`).Find(dom)
			if m := regexp.MustCompile(`data-errors="([^"]*)"`).FindSubmatch(body); m != nil {
				t.Fatalf("errors in the page: %s", m[1])
			}
			drawn := regexp.MustCompile(`data-drawn="(\d+)" data-charts="(\d+)"`).FindSubmatch(body)
			if drawn == nil {
				t.Fatalf("the page did not report its charts: %s", body)
			}
			d, _ := strconv.Atoi(string(drawn[1]))
			n, _ := strconv.Atoi(string(drawn[2]))
			if n < r.charts || d != n {
				t.Fatalf("%d of %d charts drawn, want all of at least %d", d, n, r.charts)
			}
			shot := filepath.Join(dir, r.name+".png")
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
			t.Logf("%d charts drawn", n)
		})
	}
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
