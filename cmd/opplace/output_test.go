package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opplace/opplace/onnx/onnxpb"
	"github.com/opplace/opplace/plan"
)

// outputDir is a directory holding a copy of a real model and a cluster
// file, so tests may try to overwrite them.
func outputDir(t *testing.T) (dir, model, cluster string) {
	t.Helper()
	dir = t.TempDir()
	model, cluster = filepath.Join(dir, "m.onnx"), filepath.Join(dir, "c.yaml")
	copyFile(t, filepath.Join(modelDir, "vgg16.onnx"), model)
	copyFile(t, filepath.Join(clusterDir, "4xV100.yaml"), cluster)
	return dir, model, cluster
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshot is every file under dir with its content (links by target),
// to tell that a failed run changed nothing.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.Type()&os.ModeSymlink != 0:
			dest, _ := os.Readlink(path)
			files[rel] = "-> " + dest
		case d.Type().IsRegular():
			data, _ := os.ReadFile(path)
			files[rel] = string(data)
		default:
			files[rel] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every refused output exits 2 with a message naming it and what to do,
// before planning, and leaves every file as it was: no input replaced, no
// earlier output overwritten, no temporary left.
func TestOutputRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(dir, model, cluster string) []string
		want string
	}{
		{"--out is the model", func(dir, model, cluster string) []string {
			return []string{"--out", model}
		}, "--out " + "MODEL: is the model"},
		{"--out is the model through ./", func(dir, model, cluster string) []string {
			return []string{"--out", filepath.Join(dir, ".", "m.onnx")}
		}, "is the model"},
		{"--out is a hard link to the model", func(dir, model, cluster string) []string {
			os.Link(model, filepath.Join(dir, "hard.onnx"))
			return []string{"--out", filepath.Join(dir, "hard.onnx")}
		}, "is the model"},
		{"--dot is the cluster file", func(dir, model, cluster string) []string {
			return []string{"--dot", cluster}
		}, "is the cluster file"},
		{"--emit-model is the model", func(dir, model, cluster string) []string {
			return []string{"--emit-model", model}
		}, "--emit-model MODEL: is the model"},
		{"--out and --emit-model one file", func(dir, model, cluster string) []string {
			return []string{"--out", filepath.Join(dir, "p.json"), "--emit-model", filepath.Join(dir, "p.json")}
		}, "is the same file as --out"},
		{"--out and --trace one file", func(dir, model, cluster string) []string {
			return []string{"--out", filepath.Join(dir, "p.json"), "--trace", filepath.Join(dir, "x", "..", "p.json")}
		}, "--trace"},
		{"--dot in a missing directory", func(dir, model, cluster string) []string {
			return []string{"--out", filepath.Join(dir, "plan.json"), "--dot", filepath.Join(dir, "nodir", "x.dot")}
		}, "does not exist; create it first"},
		{"--emit-model in a missing directory", func(dir, model, cluster string) []string {
			return []string{"--out", filepath.Join(dir, "plan.json"), "--emit-model", filepath.Join(dir, "nodir", "m.onnx")}
		}, "--emit-model DIR/nodir/m.onnx: directory DIR/nodir does not exist"},
		{"--out in a missing absolute directory", func(dir, model, cluster string) []string {
			return []string{"--out", "/nonexistent-opplace-dir/x.json"}
		}, "--out /nonexistent-opplace-dir/x.json: directory /nonexistent-opplace-dir does not exist"},
		{"--out a directory", func(dir, model, cluster string) []string {
			return []string{"--out", dir}
		}, "is a directory"},
		{"--emit-model where its external data cannot be named", func(dir, model, cluster string) []string {
			os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			return []string{"--out", filepath.Join(dir, "plan.json"), "--emit-model", filepath.Join(dir, "sub", "m.onnx")}
		}, `keeps its data in the external file "vgg16.weights"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, model, cluster := outputDir(t)
			os.WriteFile(filepath.Join(dir, "plan.json"), []byte("earlier plan"), 0o644)
			args := append([]string{"plan", model, "--cluster", cluster, "--mode", "infer", "-o", "table"}, tc.args(dir, model, cluster)...)
			before := snapshot(t, dir)
			code, _, stderr := invoke(t, args...)
			want := strings.NewReplacer("MODEL", model, "DIR", dir).Replace(tc.want)
			if code != exitInvalid || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
			}
			if strings.Contains(stderr, ".tmp") {
				t.Errorf("the message names a temporary file: %s", stderr)
			}
			if after := snapshot(t, dir); !mapsEqual(before, after) {
				t.Errorf("the run changed files:\nbefore %v\nafter  %v", keys(before), keys(after))
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var ks []string
	for k, v := range m {
		ks = append(ks, k+"("+strconv.Itoa(len(v))+" bytes)")
	}
	slices.Sort(ks)
	return ks
}

// A costed graph has no place for devices: --emit-model on one is bad
// input (exit 2), said before any planning, and writes nothing.
func TestOutputEmitCosted(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := invoke(t, "plan", filepath.Join("..", "..", "testdata", "costed", "mlp_train.json"),
		"--cluster", filepath.Join(clusterDir, "4xV100.yaml"), "--out", filepath.Join(dir, "plan.json"), "--emit-model", filepath.Join(dir, "m.json"))
	if code != exitInvalid || !strings.Contains(stderr, "a costed model has no place for devices") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if got := snapshot(t, dir); len(got) != 0 {
		t.Errorf("files written: %v", keys(got))
	}
}

// Symbolic links are written through, device nodes and FIFOs written to:
// the link stays a link, /dev/full stays a device and fails with exit 2
// (leaving the plan file as it was), a FIFO's reader gets the plan,
// /dev/stdout is standard output.
func TestOutputThroughLinksAndDevices(t *testing.T) {
	dir, model, cluster := outputDir(t)
	base := []string{"plan", model, "--cluster", cluster, "--mode", "infer", "--strategy", "m-etf"}
	checkPlanFile := func(t *testing.T, data []byte) {
		t.Helper()
		var p plan.Plan
		if err := json.Unmarshal(data, &p); err != nil || p.Strategy != "m-etf" {
			t.Errorf("not the plan (%v): %.80q", err, data)
		}
	}

	t.Run("symbolic link", func(t *testing.T) {
		os.WriteFile(filepath.Join(dir, "real.json"), []byte("old"), 0o644)
		link := filepath.Join(dir, "link.json")
		os.Symlink("real.json", link)
		if code, _, stderr := invoke(t, append(base, "--out", link, "-o", "table")...); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link was replaced")
		}
		data, _ := os.ReadFile(filepath.Join(dir, "real.json"))
		checkPlanFile(t, data)
	})

	t.Run("a full device", func(t *testing.T) {
		full := fullDevice(t, dir)
		os.WriteFile(filepath.Join(dir, "plan.json"), []byte("earlier plan"), 0o644)
		code, _, stderr := invoke(t, append(base, "--out", filepath.Join(dir, "plan.json"), "--trace", full, "-o", "table")...)
		if code != exitInvalid || !strings.Contains(stderr, "--trace "+full+": no space left on device") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		if st, err := os.Stat(full); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("%s is no longer a character device (%v)", full, err)
		}
		if data, _ := os.ReadFile(filepath.Join(dir, "plan.json")); string(data) != "earlier plan" {
			t.Errorf("plan.json was changed by a failed run")
		}
	})

	t.Run("FIFO", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		got := make(chan []byte)
		go func() {
			data, _ := os.ReadFile(fifo)
			got <- data
		}()
		if code, _, stderr := invoke(t, append(base, "--out", fifo, "-o", "table")...); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("the FIFO was replaced")
		}
		select {
		case data := <-got:
			checkPlanFile(t, data)
		case <-time.After(time.Minute):
			t.Errorf("the FIFO's reader got nothing")
		}
	})

	// /dev/fd/1 rather than /dev/stdout: code that replaced the file it
	// was given would fail here to create a temporary in /proc, where it
	// would replace the machine's /dev/stdout.
	t.Run("standard output", func(t *testing.T) {
		code, stdout, stderr := invoke(t, append(base, "--out", "/dev/fd/1", "-o", "table")...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		i := strings.Index(stdout, "\nmodel:")
		if i < 0 {
			t.Fatalf("no table after the plan on stdout: %.200q", stdout)
		}
		checkPlanFile(t, []byte(stdout[:i+1]))
	})

	t.Run("report to stdout and onto its plan", func(t *testing.T) {
		p := filepath.Join(dir, "p.json")
		if code, _, stderr := invoke(t, append(base, "--out", p, "-o", "table")...); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		before, _ := os.ReadFile(p)
		code, _, stderr := invoke(t, "report", p, "-o", p, "--no-graphviz")
		if code != exitInvalid || !strings.Contains(stderr, "is the plan") {
			t.Errorf("report onto its plan: exit %d, %s", code, stderr)
		}
		if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
			t.Errorf("report replaced its plan")
		}
		code, stdout, stderr := invoke(t, "report", p, "-o", "-", "--no-graphviz")
		if code != 0 || !strings.HasPrefix(stdout, "<!DOCTYPE html>") {
			t.Errorf("report -o -: exit %d, %s, %.40q", code, stderr, stdout)
		}
	})
}

// fullDevice makes a private /dev/full (character device 1,7) in dir, so
// code that replaced device nodes would replace this one and not the
// machine's. It needs root, as CI runs.
func fullDevice(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "full")
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, 1<<8|7); err != nil {
		t.Skipf("cannot make a device node: %v", err)
	}
	return path
}

// --emit-model into another directory rewrites the model's external data
// locations to name the same files from there; onnx.load (python3-onnx)
// then reads the weights.
func TestOutputEmitRelocatesExternalData(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "models", "m.onnx")
	os.MkdirAll(filepath.Dir(src), 0o755)
	copyFile(t, filepath.Join(modelDir, "vgg16.onnx"), src)
	// The weights file the shared model names but lacks, as zeros.
	mp := &onnxpb.ModelProto{}
	data, _ := os.ReadFile(src)
	if err := proto.Unmarshal(data, mp); err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, init := range mp.Graph.Initializer {
		ext := map[string]string{}
		for _, e := range init.ExternalData {
			ext[e.GetKey()] = e.GetValue()
		}
		if ext["location"] != "vgg16.weights" {
			t.Fatalf("initializer %s is stored at %q", init.GetName(), ext["location"])
		}
		off, _ := strconv.ParseInt(ext["offset"], 10, 64)
		n, _ := strconv.ParseInt(ext["length"], 10, 64)
		size = max(size, off+n)
	}
	if err := os.WriteFile(filepath.Join(dir, "models", "vgg16.weights"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dst, location string }{
		{filepath.Join(dir, "m.placed.onnx"), "models/vgg16.weights"},
		{filepath.Join(dir, "models", "m.placed.onnx"), "vgg16.weights"},
	} {
		code, _, stderr := invoke(t, "plan", src, "--cluster", filepath.Join(clusterDir, "4xV100.yaml"), "--mode", "infer", "-o", "table", "--emit-model", tc.dst)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		out := &onnxpb.ModelProto{}
		data, _ := os.ReadFile(tc.dst)
		if err := proto.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		for _, init := range out.Graph.Initializer {
			for _, e := range init.ExternalData {
				if e.GetKey() == "location" && e.GetValue() != tc.location {
					t.Errorf("%s: %s stored at %q, want %q", tc.dst, init.GetName(), e.GetValue(), tc.location)
				}
			}
		}
		py := "/usr/bin/python3"
		if exec.Command(py, "-c", "import onnx").Run() != nil {
			continue
		}
		got, err := exec.Command(py, "-c", `import sys, onnx
m = onnx.load(sys.argv[1])
print(sum(len(t.raw_data) for t in m.graph.initializer))`, tc.dst).CombinedOutput()
		if err != nil || strings.TrimSpace(string(got)) != strconv.FormatInt(size, 10) {
			t.Errorf("%s: onnx.load read %s bytes of weights (%v), want %d", tc.dst, got, err, size)
		}
	}
}

// profile and report follow the same rules as plan, before any work.
func TestOutputOtherCommands(t *testing.T) {
	// A real plan and a real profile of the model to read back.
	dir, model, cluster := outputDir(t)
	planFile, profFile := filepath.Join(dir, "plan.json"), filepath.Join(dir, "prof.json")
	if code, _, stderr := invoke(t, "plan", model, "--cluster", cluster, "--mode", "infer", "--strategy", "m-etf", "--out", planFile); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	profileArgs := []string{"--max-time", "1s", "--shape", "input.1=1,3,224,224"}
	if code, _, stderr := invoke(t, append([]string{"profile", model, "--out", profFile}, profileArgs...)...); code != 0 {
		t.Fatalf("profile: exit %d: %s", code, stderr)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"profile --out is the model", []string{"profile", model, "--out", model}, "--out MODEL: is the model"},
		{"profile --out is the profile read", []string{"profile", model, "--from", profFile, "--out", profFile}, "--out DIR/prof.json: is the profile"},
		{"profile --out and --cluster-out one file", []string{"profile", model, "--out", filepath.Join(dir, "x"), "--cluster-out", filepath.Join(dir, "x")},
			"--cluster-out DIR/x: is the same file as --out DIR/x"},
		{"profile --out in a missing directory", []string{"profile", model, "--out", filepath.Join(dir, "nodir", "p.json")}, "DIR/nodir does not exist"},
		{"report -o is the plan", []string{"report", planFile, "-o", planFile, "--no-graphviz"}, "--out DIR/plan.json: is the plan"},
		{"report -o in a missing directory", []string{"report", planFile, "-o", filepath.Join(dir, "nodir", "r.html"), "--no-graphviz"},
			"--out DIR/nodir/r.html: directory DIR/nodir does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args[0] == "profile" {
				// Code that measured before refusing measures briefly.
				args = append(args, profileArgs...)
			}
			before := snapshot(t, dir)
			code, _, stderr := invoke(t, args...)
			want := strings.NewReplacer("MODEL", model, "DIR", dir).Replace(tc.want)
			if code != exitInvalid || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
			}
			if after := snapshot(t, dir); !mapsEqual(before, after) {
				t.Errorf("the run changed files:\nbefore %v\nafter  %v", keys(before), keys(after))
			}
		})
	}
}
