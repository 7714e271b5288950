package main

import (
	"bytes"
	"context"
	"github.com/opplace/opplace/plan"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// reportPlan plans GPT-2 small on the two-host cluster into dir and
// returns the plan file.
func reportPlan(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	path := filepath.Join(dir, "plan.json")
	args := append([]string{"plan", filepath.Join(modelDir, "gpt2_small.onnx"), "--cluster", filepath.Join(clusterDir, "8xA100-2host.yaml"),
		"--dim", "batch=8", "--out", path}, extra...)
	if code, _, stderr := invoke(t, args...); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	return path
}

func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	planFile := reportPlan(t, dir)
	out := filepath.Join(dir, "report.html")
	code, stdout, stderr := invoke(t, "report", planFile, "-o", out)
	if code != 0 || stdout != "" {
		t.Fatalf("report: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	html, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Plan report: gpt2_small.onnx", "auto:tensor", `<span class="big">FITS</span>`, `class="gantt chart"`,
		`class="mem chart"`, `<table class="stages">`, `class="cands chart"`, "Written by opplace report from " + planFile} {
		if !bytes.Contains(html, []byte(w)) {
			t.Errorf("report lacks %q", w)
		}
	}
	// Atomic: no temporary file left beside it.
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the output directory, want the plan and the report", len(entries))
	}
	// -o - writes the same page to stdout; a YAML plan gives the same page.
	code, stdout, _ = invoke(t, "report", planFile, "-o", "-")
	if code != 0 || stdout != string(html) {
		t.Errorf("report -o -: exit %d, %d bytes, want the %d bytes of the file", code, len(stdout), len(html))
	}
	yamlFile := filepath.Join(dir, "plan.yaml")
	if code, _, stderr := invoke(t, "plan", filepath.Join(modelDir, "gpt2_small.onnx"), "--cluster", filepath.Join(clusterDir, "8xA100-2host.yaml"),
		"--dim", "batch=8", "--out", yamlFile); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	code, stdout, _ = invoke(t, "report", yamlFile, "-o", "-")
	if want := strings.ReplaceAll(string(html), planFile, yamlFile); code != 0 || stdout != want {
		t.Errorf("report of the YAML plan: exit %d, differs from the JSON plan's", code)
	}

	code, stdout, _ = invoke(t, "report", "--help")
	if code != 0 || !strings.Contains(stdout, "Examples:") || !strings.Contains(stdout, "opplace report plan.json -o report.html") {
		t.Errorf("report --help: exit %d, no example:\n%s", code, stdout)
	}
}

func TestReportBadInput(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.json")
	os.WriteFile(corrupt, []byte(`{"model": "m", "devices": [`), 0o644)
	notPlan := filepath.Join(dir, "cluster.yaml")
	os.WriteFile(notPlan, []byte("name: c\nhosts: []\n"), 0o644)
	missing := filepath.Join(dir, "missing.json")
	out := filepath.Join(dir, "report.html")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no out", []string{"report", corrupt}, "--out FILE is required"},
		{"no plan", []string{"report", "-o", out}, "accepts 1 arg(s)"},
		{"missing", []string{"report", missing, "-o", out}, missing + ": cannot read the plan: no such file or directory"},
		{"directory", []string{"report", dir, "-o", out}, dir + ": cannot read the plan"},
		{"corrupt", []string{"report", corrupt, "-o", out}, corrupt + ": not a valid JSON plan"},
		{"not a plan", []string{"report", notPlan, "-o", out}, notPlan + ": not an opplace plan (it looks like a cluster file)"},
		{"bad flag", []string{"report", corrupt, "-o", out, "--bogus"}, "unknown flag: --bogus"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := invoke(t, c.args...)
			if code != exitInvalid || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit %d and one line with %q", code, stderr, exitInvalid, c.want)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed report left %s behind", out)
	}
}

// chromium finds a headless browser: Debian's chromium, which make setup
// installs.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed in CI: `make setup` should install it")
	}
	t.Skip("chromium is not installed (apt install chromium)")
	return ""
}

// browse runs headless chromium on a page with extra flags and returns
// its stdout and stderr. A browser that hangs past its time limit (on a
// loaded machine headless Chromium sometimes never exits; the same page
// renders in seconds when it does) is run once more before the test
// fails.
func browse(t *testing.T, browser, page string, extra ...string) (string, string) {
	t.Helper()
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
			"--hide-scrollbars", "--user-data-dir=" + t.TempDir()}, extra...)
		cmd := exec.CommandContext(ctx, browser, append(args, "file://"+page)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if err != nil && timedOut && try == 0 {
			t.Logf("%s did not exit within 120 s; running it once more", browser)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", browser, err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
}

// TestReportBrowser opens a real plan's report in headless Chromium: the
// page renders every chart at a size, logs no error, and its screenshot
// is a picture, not a blank page.
func TestReportBrowser(t *testing.T) {
	browser := chromium(t)
	dir := t.TempDir()
	planFile := reportPlan(t, dir, "--strategy", "pipeline")
	page := filepath.Join(dir, "report.html")
	if code, _, stderr := invoke(t, "report", planFile, "-o", page); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	page, _ = filepath.Abs(page)

	// The rendered DOM: the page's script counts the SVGs laid out with no
	// width or height.
	dom, logs := browse(t, browser, page, "--dump-dom", "--enable-logging=stderr", "--v=0")
	m := regexp.MustCompile(`data-rendered="(\d+) svg, (\d+) empty"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page's script did not run: no data-rendered attribute in the DOM (%d bytes)", len(dom))
	}
	// Gantt, a memory panel per stage (a stage's replicas share one), a
	// bar per stage, Graphviz's view; and the last op of the first stage.
	p, err := plan.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(m[1]); n < 2+2*len(p.Stages) || m[2] != "0" {
		t.Errorf("rendered %s SVGs, %s of them empty; want at least %d (%d stages), none empty", m[1], m[2], 2+2*len(p.Stages), len(p.Stages))
	}
	if len(p.Stages) < 2 {
		t.Fatalf("the plan has %d stage(s); the test wants a pipeline", len(p.Stages))
	}
	for _, w := range []string{"<h2>Summary</h2>", "pipeline:exact", "Stages and split points", `class="dotview"`, p.Stages[0].LastOp} {
		if !strings.Contains(dom, w) {
			t.Errorf("rendered DOM lacks %q", w)
		}
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "Uncaught") || strings.Contains(line, "CONSOLE") {
			t.Errorf("browser console: %s", line)
		}
	}

	shot := filepath.Join(dir, "report.png")
	browse(t, browser, page, "--screenshot="+shot, "--window-size=1400,3000")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	colours, inked, total := pictureStats(img)
	if b := img.Bounds(); b.Dx() != 1400 || b.Dy() != 3000 {
		t.Errorf("screenshot is %dx%d, want 1400x3000", b.Dx(), b.Dy())
	}
	// A blank or unstyled page has a handful of colours and little ink;
	// the report's charts have hundreds.
	if colours < 200 || float64(inked) < 0.05*float64(total) {
		t.Errorf("screenshot looks blank: %d colours, %.1f%% of pixels not white", colours, 100*float64(inked)/float64(total))
	}
	if out := os.Getenv("OPPLACE_REPORT_SCREENSHOT"); out != "" {
		data, _ := os.ReadFile(shot)
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// pictureStats counts an image's distinct colours and its pixels that
// are not (nearly) white.
func pictureStats(img image.Image) (colours, inked, total int) {
	seen := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			if r>>8 < 240 || g>>8 < 240 || bl>>8 < 240 {
				inked++
			}
			total++
		}
	}
	return len(seen), inked, total
}
