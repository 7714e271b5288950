package ort

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
)

// EnvLibrary is the environment variable that names the ONNX Runtime
// shared library.
const EnvLibrary = "OPPLACE_ONNXRUNTIME"

// npmDir is where the onnxruntime-node npm package keeps the shared
// library for this platform, under its package directory.
func npmDir() string {
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	return filepath.Join("bin", "napi-v6", runtime.GOOS, arch)
}

// libName is the shared library's file name in the npm package.
func libName() string {
	if runtime.GOOS == "darwin" {
		return "libonnxruntime.1.dylib"
	}
	return "libonnxruntime.so.1"
}

// NotFoundError says that no ONNX Runtime library was found, and how to
// get one.
type NotFoundError struct {
	// Explicit is the path asked for, if any; Tried the places looked in.
	Explicit string
	Tried    []string
	Err      error
}

func (e *NotFoundError) Error() string {
	how := "install it with `npm install onnxruntime-node@1.30.0 --ignore-scripts` (set ONNXRUNTIME_NODE_INSTALL=skip; the library is node_modules/onnxruntime-node/" +
		filepath.ToSlash(npmDir()) + "/" + libName() + ") or a release from github.com/microsoft/onnxruntime, and name the library file with the " +
		EnvLibrary + " environment variable or the library option"
	if e.Explicit != "" {
		return fmt.Sprintf("ONNX Runtime library %s: %v; %s", e.Explicit, e.Err, how)
	}
	return fmt.Sprintf("no ONNX Runtime shared library found (looked in %d places: $%s, ./node_modules/onnxruntime-node, .cache/onnxruntime-node of this directory and its parents, /usr/lib, /usr/local/lib); %s",
		len(e.Tried), EnvLibrary, how)
}

func (e *NotFoundError) Unwrap() error { return e.Err }

// Find returns the path of the ONNX Runtime shared library: explicit if
// given (it must exist), else the file $OPPLACE_ONNXRUNTIME names, else
// the first that exists of: node_modules/onnxruntime-node's library and
// .cache/onnxruntime-node's in the working directory or a parent (npm
// installs there; a repository checkout can keep one in .cache), then
// libonnxruntime.so* in /usr/local/lib, /usr/lib and
// /usr/lib/<arch>-linux-gnu. Paths are absolute.
func Find(explicit string) (string, error) {
	check := func(p string) (string, error) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return "", err
		}
		if st.IsDir() {
			return "", fmt.Errorf("is a directory, not the library file")
		}
		return abs, nil
	}
	if explicit != "" {
		p, err := check(explicit)
		if err != nil {
			return "", &NotFoundError{Explicit: explicit, Err: err}
		}
		return p, nil
	}
	if env := os.Getenv(EnvLibrary); env != "" {
		p, err := check(env)
		if err != nil {
			return "", &NotFoundError{Explicit: env + " ($" + EnvLibrary + ")", Err: err}
		}
		return p, nil
	}
	var tried []string
	rel := filepath.Join(npmDir(), libName())
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			tried = append(tried,
				filepath.Join(dir, "node_modules", "onnxruntime-node", rel),
				// make setup's npm prefix: .cache/onnxruntime-node/node_modules/onnxruntime-node.
				filepath.Join(dir, ".cache", "onnxruntime-node", "node_modules", "onnxruntime-node", rel))
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	for _, dir := range []string{"/usr/local/lib", "/usr/lib", "/usr/lib/" + map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH] + "-linux-gnu"} {
		m, _ := filepath.Glob(filepath.Join(dir, "libonnxruntime.so*"))
		slices.Sort(m) // libonnxruntime.so before its versioned names
		tried = append(tried, m...)
		if len(m) == 0 {
			tried = append(tried, filepath.Join(dir, "libonnxruntime.so"))
		}
	}
	for _, p := range tried {
		if abs, err := check(p); err == nil {
			return abs, nil
		}
	}
	return "", &NotFoundError{Tried: tried, Err: os.ErrNotExist}
}
