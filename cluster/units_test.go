package cluster

import (
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string // substring of the error; "" for success
	}{
		{"0", 0, ""},
		{"17179869184", 16 << 30, ""},
		{"512B", 512, ""},
		{"1KB", 1000, ""},
		{"1kB", 1000, ""},
		{"16GB", 16e9, ""},
		{"2TB", 2e12, ""},
		{"1PB", 1e15, ""},
		{"1KiB", 1024, ""},
		{"1.5KiB", 1536, ""},
		{"16GiB", 16 << 30, ""},
		{"16 GiB", 16 << 30, ""},
		{"  80GiB ", 80 << 30, ""},
		{"1TiB", 1 << 40, ""},
		{"1PiB", 1 << 50, ""},
		{"1e3MB", 1e9, ""},
		{".5KiB", 512, ""},
		{"1.0000000004B", 1, ""},

		{"", 0, "empty size"},
		{"GiB", 0, "cannot read"},
		{"-1GiB", 0, "negative"},
		{"16gib", 0, `unknown unit "gib"`},
		{"16GiB/s", 0, `unknown unit "GiB/s"`},
		{"16 G", 0, `unknown unit "G"`},
		{"0x10", 0, `unknown unit "x10"`},
		{"Inf", 0, "cannot read"},
		{"NaN", 0, "cannot read"},
		{"1e400", 0, "out of range"},
		{"10000000PiB", 0, "too large"},
		{"1.2.3GB", 0, "cannot read"},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		checkParse(t, "ParseBytes", tt.in, float64(got), err, float64(tt.want), tt.err)
	}
}

func TestParseBandwidth(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		err  string
	}{
		{"0", 0, ""},
		{"900GB/s", 900e9, ""},
		{"16 GB/s", 16e9, ""},
		{"1B/s", 1, ""},
		{"12GiB/s", 12 << 30, ""},
		{"100Gb/s", 12.5e9, ""},
		{"100Gbit/s", 12.5e9, ""},
		{"100Gbps", 12.5e9, ""},
		{"400 Gb/s", 50e9, ""},
		{"10Mb/s", 1.25e6, ""},
		{"1kb/s", 125, ""},
		{"8b/s", 1, ""},
		{"3.35TB/s", 3.35e12, ""},

		{"16", 0, "needs a unit"},
		{"16GB", 0, `unknown unit "GB"`},
		{"16gb/s", 0, `unknown unit "gb/s"`},
		{"-1GB/s", 0, "negative"},
		{"fast", 0, "cannot read"},
		{"", 0, "empty bandwidth"},
	}
	for _, tt := range tests {
		got, err := ParseBandwidth(tt.in)
		checkParse(t, "ParseBandwidth", tt.in, got, err, tt.want, tt.err)
	}
}

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		err  string
	}{
		{"0", 0, ""},
		{"0us", 0, ""},
		{"1s", 1, ""},
		{"1.5s", 1.5, ""},
		{"2ms", 2e-3, ""},
		{"5us", 5e-6, ""},
		{"5 us", 5e-6, ""},
		{"5µs", 5e-6, ""}, // U+00B5 micro sign
		{"5μs", 5e-6, ""}, // U+03BC Greek mu
		{"100ns", 100e-9, ""},
		{"1e-6s", 1e-6, ""},
		{"0.5ms", 5e-4, ""},

		{"5", 0, "needs a unit"},
		{"5sec", 0, `unknown unit "sec"`},
		{"5m", 0, `unknown unit "m"`},
		{"-5us", 0, "negative"},
		{"us", 0, "cannot read"},
	}
	for _, tt := range tests {
		got, err := ParseSeconds(tt.in)
		checkParse(t, "ParseSeconds", tt.in, got, err, tt.want, tt.err)
	}
}

func TestParseFLOPS(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		err  string
	}{
		{"15.7T", 15.7e12, ""},
		{"125T", 125e12, ""},
		{"1.57e13", 1.57e13, ""},
		{"15700000000000", 15.7e12, ""},
		{"15.7TFLOPS", 15.7e12, ""},
		{"15.7 TFLOP/s", 15.7e12, ""},
		{"989.5T", 989.5e12, ""},
		{"2P", 2e15, ""},
		{"500G", 500e9, ""},
		{"3M", 3e6, ""},
		{"4k", 4e3, ""},
		{"4K", 4e3, ""},
		{"100FLOPS", 100, ""},

		{"15.7t", 0, `unknown unit "t"`},
		{"1E", 0, `unknown unit "E"`},
		{"15.7TB", 0, `unknown unit "TB"`},
		{"-1T", 0, "negative"},
		{"T", 0, "cannot read"},
	}
	for _, tt := range tests {
		got, err := ParseFLOPS(tt.in)
		checkParse(t, "ParseFLOPS", tt.in, got, err, tt.want, tt.err)
	}
}

// checkParse compares one parser result; figures must match exactly,
// since the parsers round once from the exact decimal value.
func checkParse(t *testing.T, fn, in string, got float64, err error, want float64, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil {
			t.Errorf("%s(%q) = %v, want error containing %q", fn, in, got, wantErr)
		} else if !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s(%q) error = %q, want it to contain %q", fn, in, err, wantErr)
		}
		return
	}
	if err != nil {
		t.Errorf("%s(%q) error: %v", fn, in, err)
		return
	}
	if got != want {
		t.Errorf("%s(%q) = %v, want %v", fn, in, got, want)
	}
}

func TestSplitNumber(t *testing.T) {
	tests := []struct{ in, num, unit string }{
		{"5us", "5", "us"},
		{"1e-6s", "1e-6", "s"},
		{"1E3 GB", "1E3", "GB"},
		{"2e", "2", "e"},
		{"2eb", "2", "eb"},
		{"+3.5 ms", "+3.5", "ms"},
		{"GiB", "", "GiB"},
	}
	for _, tt := range tests {
		num, unit := splitNumber(tt.in)
		if num != tt.num || unit != tt.unit {
			t.Errorf("splitNumber(%q) = %q, %q; want %q, %q", tt.in, num, unit, tt.num, tt.unit)
		}
	}
}
