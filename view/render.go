package view

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// RenderTimeout bounds one Graphviz run: the views are laid out in a
// second or two, so a run past this is a view too large for dot.
const RenderTimeout = 60 * time.Second

// ErrNoGraphviz is returned when Graphviz's dot is not installed.
var ErrNoGraphviz = errors.New("rendering needs Graphviz's dot program on PATH (Debian and Ubuntu: apt install graphviz; macOS: brew install graphviz); the .dot view can still be written and rendered elsewhere")

// ErrRenderTimeout is returned when Graphviz ran past its time limit.
var ErrRenderTimeout = errors.New("Graphviz did not lay the view out in time: draw a coarser level or fewer ops")

// RenderFormats are the picture formats Render writes.
var RenderFormats = []string{"svg", "png"}

// Render lays out a DOT view with Graphviz's dot and returns the picture
// in format (svg or png), giving up after timeout (0: RenderTimeout).
func Render(ctx context.Context, dot []byte, format string, timeout time.Duration) ([]byte, error) {
	switch format {
	case "svg", "png":
	default:
		return nil, fmt.Errorf("cannot render %q (use %s)", format, strings.Join(RenderFormats, " or "))
	}
	path, err := exec.LookPath("dot")
	if err != nil {
		return nil, ErrNoGraphviz
	}
	if timeout <= 0 {
		timeout = RenderTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"-T" + format}
	if format == "png" {
		args = append(args, "-Gdpi=96")
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = bytes.NewReader(dot)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("%w (limit %v)", ErrRenderTimeout, timeout)
		}
		return nil, fmt.Errorf("Graphviz failed: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}
