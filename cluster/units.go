package cluster

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// A unit is one accepted spelling of a unit and its factor to the base
// unit (bytes, bytes per second, seconds or FLOP/s) as the exact fraction
// num/den, so that "5us" reads as exactly the float64 nearest 5e-6, and
// "100Gb/s" as 12.5e9, as the same figures written in Go would.
type unit struct {
	name     string
	num, den int64
}

// Size units. Decimal prefixes are powers of 1000 and binary ones powers
// of 1024, as in IEC 80000-13; datasheets quote GPU memory bandwidth in
// decimal units and memory capacity (loosely) in binary ones.
var sizeUnits = []unit{
	{"B", 1, 1},
	{"KB", 1e3, 1}, {"kB", 1e3, 1}, {"MB", 1e6, 1}, {"GB", 1e9, 1}, {"TB", 1e12, 1}, {"PB", 1e15, 1},
	{"KiB", 1 << 10, 1}, {"MiB", 1 << 20, 1}, {"GiB", 1 << 30, 1}, {"TiB", 1 << 40, 1}, {"PiB", 1 << 50, 1},
}

// bandwidthUnits are the size units per second plus bits per second,
// which network links are quoted in (100Gb/s is 12.5GB/s).
var bandwidthUnits = func() []unit {
	var us []unit
	for _, u := range sizeUnits {
		us = append(us, unit{u.name + "/s", u.num, u.den})
	}
	bitPrefixes := []unit{{"", 1, 1}, {"K", 1e3, 1}, {"k", 1e3, 1}, {"M", 1e6, 1}, {"G", 1e9, 1}, {"T", 1e12, 1}}
	for _, p := range bitPrefixes {
		for _, s := range []string{"b/s", "bit/s", "bps"} {
			us = append(us, unit{p.name + s, p.num, 8})
		}
	}
	return us
}()

// timeUnits accept both the micro sign U+00B5 and the Greek mu U+03BC,
// which look alike and are both typed for "µs".
var timeUnits = []unit{
	{"s", 1, 1}, {"ms", 1, 1e3}, {"us", 1, 1e6}, {"\u00b5s", 1, 1e6}, {"\u03bcs", 1, 1e6}, {"ns", 1, 1e9},
}

// flopsUnits are SI prefixes, bare or followed by FLOPS or FLOP/s.
var flopsUnits = func() []unit {
	var us []unit
	prefixes := []unit{{"", 1, 1}, {"K", 1e3, 1}, {"k", 1e3, 1}, {"M", 1e6, 1}, {"G", 1e9, 1}, {"T", 1e12, 1}, {"P", 1e15, 1}}
	for _, p := range prefixes {
		for _, s := range []string{"", "FLOPS", "FLOP/s", "flops", "flop/s"} {
			if p.name == "" && s == "" {
				continue // the bare number, handled by parseQuantity
			}
			us = append(us, unit{p.name + s, p.num, p.den})
		}
	}
	return us
}()

// splitNumber splits s into a leading decimal number and the unit after
// it. It stops at the first letter so that "5us" and "1e-6s" split as
// expected; ParseFloat's extras (Inf, NaN, hex, underscores) are thus
// never reached.
func splitNumber(s string) (num, unit string) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	// An exponent needs a digit after the e (and optional sign).
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && s[j] >= '0' && s[j] <= '9' {
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			i = j
		}
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// errNoUnit reports a bare non-zero number where a unit is required.
var errNoUnit = errors.New("needs a unit")

// parseQuantity reads "<number>[ ]<unit>" with unit from units. A bare
// number is taken in the base unit when bare is true; a bare zero is
// always accepted since its unit does not matter. The result is finite
// and non-negative.
func parseQuantity(s, what string, units []unit, bare bool, examples string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty %s; give one like %s", what, examples)
	}
	num, u := splitNumber(s)
	// ParseFloat first: it rejects bad syntax and huge exponents cheaply,
	// before big.Rat would build a 10^1000000.
	v, err := strconv.ParseFloat(num, 64)
	if num == "" || len(num) > 64 || err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("cannot read %q as a %s; write a number and a unit, like %s", s, what, examples)
	}
	if v < 0 || strings.HasPrefix(num, "-") {
		return 0, fmt.Errorf("%s %q is negative; it must be positive", what, s)
	}
	mult := unit{"", 1, 1}
	if u == "" {
		if !bare && v != 0 {
			return 0, fmt.Errorf("%s %q %w; write it like %s", what, s, errNoUnit, examples)
		}
	} else {
		found := false
		for _, c := range units {
			if c.name == u {
				mult, found = c, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown unit %q in %s %q; use %s", u, what, s, unitList(units, examples))
		}
	}
	if math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s %q is out of range", what, s)
	}
	if v == 0 {
		return 0, nil
	}
	// Scale exactly, then round once.
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("cannot read %q as a %s; write a number and a unit, like %s", s, what, examples)
	}
	r.Mul(r, big.NewRat(mult.num, mult.den))
	v, _ = r.Float64()
	if math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s %q is out of range", what, s)
	}
	return v, nil
}

// unitList names the accepted units for an error message; the bit-rate
// and FLOPS tables are long, so those get their examples instead.
func unitList(units []unit, examples string) string {
	if len(units) > 12 {
		return "units like " + examples
	}
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.name
	}
	return strings.Join(names, ", ") + " (e.g. " + examples + ")"
}

// ParseBytes reads a memory size: a plain integer is bytes; B, KB, MB,
// GB, TB, PB are powers of 1000 and KiB, MiB, GiB, TiB, PiB powers of
// 1024 ("16GiB", "900 MB"). Fractions round to the nearest byte.
func ParseBytes(s string) (int64, error) {
	v, err := parseQuantity(s, "size", sizeUnits, true, "16GiB or 900MB")
	if err != nil {
		return 0, err
	}
	// 2^63 itself is not representable; stay strictly below it.
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", strings.TrimSpace(s))
	}
	return int64(math.Round(v)), nil
}

// ParseBandwidth reads a bandwidth in bytes per second. It takes the
// size units followed by /s ("16GB/s", "12GiB/s") and bit rates
// ("100Gb/s", "100Gbit/s", "100Gbps", each one eighth of the byte
// figure). A bare number other than 0 is refused: whether it meant bytes
// or bits per second cannot be told.
func ParseBandwidth(s string) (float64, error) {
	return parseQuantity(s, "bandwidth", bandwidthUnits, false, "16GB/s or 100Gb/s")
}

// ParseSeconds reads a duration as seconds: s, ms, us, µs or ns ("5us",
// "0.5 ms"). A bare number other than 0 is refused, since a latency of
// "5" is far more likely to mean microseconds than seconds.
func ParseSeconds(s string) (float64, error) {
	return parseQuantity(s, "duration", timeUnits, false, "5us or 1.5ms")
}

// ParseFLOPS reads a throughput in FLOP/s: a plain number ("1.57e13") or
// one with an SI prefix K, M, G, T or P ("15.7T"), optionally followed by
// FLOPS or FLOP/s ("15.7TFLOPS").
func ParseFLOPS(s string) (float64, error) {
	return parseQuantity(s, "FLOP/s figure", flopsUnits, true, "15.7T or 125TFLOPS")
}

// FormatBytes renders a size with a binary unit, "1.50 GiB", the way
// ParseBytes reads it back.
func FormatBytes(b int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v := float64(b)
	i := 0
	for (v >= 1024 || v <= -1024) && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.2f %s", v, units[i])
}
