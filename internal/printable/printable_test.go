package printable

import (
	"bytes"
	"testing"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		name, in, str, text string
	}{
		{"plain", "/layer1/conv", "/layer1/conv", "/layer1/conv"},
		{"unicode letters kept", "Schicht/Größe/层", "Schicht/Größe/层", "Schicht/Größe/层"},
		{"replacement char kept", "a\ufffdb", "a\ufffdb", "a\ufffdb"},
		{"BEL", "emb\abell", `emb\abell`, `emb\abell`},
		{"CR", "mm\rcr", `mm\rcr`, `mm\rcr`},
		{"ESC sequence", "add\x1b[31m", `add\u001b[31m`, `add\u001b[31m`},
		{"DEL", "a\x7f", `a\u007f`, `a\u007f`},
		{"C1 NEL", "a\u0085b", `a\u0085b`, `a\u0085b`},
		{"right-to-left override", "mm\u202eevil", `mm\u202eevil`, `mm\u202eevil`},
		{"bidi isolate", "a\u2067b\u2069", `a\u2067b\u2069`, `a\u2067b\u2069`},
		{"zero width space and BOM", "a\u200bb\ufeff", `a\u200bb\ufeff`, `a\u200bb\ufeff`},
		{"line separator", "a\u2028b", `a\u2028b`, `a\u2028b`},
		{"tag character", "a\U000e0041", `a\U000e0041`, `a\U000e0041`},
		{"stray byte", "a\xffb", `a\xffb`, `a\xffb`},
		{"newline and tab", "a\nb\tc", `a\nb\tc`, "a\nb\tc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := String(tc.in); got != tc.str {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.str)
			}
			if got := Text(tc.in); got != tc.text {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.text)
			}
		})
	}
}

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := Writer(&b)
	for _, s := range []string{"op\a1\tgpu0\n", "plain\n", "x\u202ey\n"} {
		if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if want := "op\\a1\tgpu0\nplain\nx\\u202ey\n"; b.String() != want {
		t.Errorf("wrote %q, want %q", b.String(), want)
	}
}
