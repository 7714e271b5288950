package constraint

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/opplace/opplace/cluster"
)

// amountSpelling is how a reserve amount is written, for messages.
const amountSpelling = "a percentage between 0 and 100 (10%) or a byte size (2GiB, 512MiB, 1.5GB, 1000000)"

// parseAmount reads a reserve amount: a percentage p with 0 < p < 100
// ("10%", giving the fraction 0.1), or a byte size as cluster files write
// memory (cluster.ParseBytes: "2GiB", "1.5GB", a plain integer is bytes),
// at least one byte. Exactly one of bytes and frac is non-zero.
func parseAmount(s string) (bytes int64, frac float64, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, 0, fmt.Errorf("empty amount; give %s", amountSpelling)
	}
	if num, ok := strings.CutSuffix(s, "%"); ok {
		num = strings.TrimSpace(num)
		p, err := strconv.ParseFloat(num, 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) || !plainNumber(num) {
			return 0, 0, fmt.Errorf("cannot read %q as a percentage; give %s", s, amountSpelling)
		}
		if p <= 0 || p >= 100 {
			return 0, 0, fmt.Errorf("percentage %s must be above 0%% and below 100%%", s)
		}
		return 0, percentFraction(num), nil
	}
	b, err := cluster.ParseBytes(s)
	if err != nil {
		return 0, 0, fmt.Errorf("%v; an amount is %s", err, amountSpelling)
	}
	if b < 1 {
		return 0, 0, fmt.Errorf("amount %q keeps nothing free; give at least one byte, or remove the rule", s)
	}
	return b, 0, nil
}

// percentFraction is the float64 nearest to the percentage num divided
// by 100 ("33.3" gives 0.333, as 33.3/100 in Go source does). num has
// passed ParseFloat, so it is a short decimal of sane magnitude.
func percentFraction(num string) float64 {
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0
	}
	f, _ := r.Quo(r, big.NewRat(100, 1)).Float64()
	return f
}

// plainNumber reports whether s is a decimal number with no sign other
// than '+', hex, underscores or words (ParseFloat reads "Inf", "0x1p3"
// and "1_0" too).
func plainNumber(s string) bool {
	s = strings.TrimPrefix(s, "+")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
			return false
		}
	}
	return s[0] != 'e' && s[0] != 'E'
}

// formatAmount spells an amount so that parseAmount reads back the same
// bytes or fraction: a percentage in the fewest digits that round-trip,
// or bytes in the largest unit that divides them exactly.
func formatAmount(bytes int64, frac float64) string {
	if frac != 0 || bytes == 0 {
		p := frac * 100
		for places := 0; places <= 40; places++ {
			s := strconv.FormatFloat(p, 'f', places, 64)
			if percentFraction(s) == frac {
				return s + "%"
			}
		}
		return strconv.FormatFloat(p, 'g', -1, 64) + "%"
	}
	for _, u := range []struct {
		name string
		size int64
	}{
		{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"PB", 1e15}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	} {
		if bytes%u.size == 0 {
			return strconv.FormatInt(bytes/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(bytes, 10)
}

// parseWeight reads a prefer weight: a finite number, at least 0.
func parseWeight(s string) (float64, error) {
	s = strings.TrimSpace(s)
	w, err := strconv.ParseFloat(s, 64)
	yamlSpecial := strings.ToLower(strings.TrimLeft(s, "+-")) // YAML writes .inf and .nan
	switch {
	case err == nil && (math.IsNaN(w) || math.IsInf(w, 0)), yamlSpecial == ".inf" || yamlSpecial == ".nan":
		return 0, fmt.Errorf("weight %q is not finite; give the milliseconds to add per op, like 2 or 0.5", s)
	case err != nil || !plainNumber(strings.TrimPrefix(s, "-")):
		return 0, fmt.Errorf("cannot read weight %q as a number; give the milliseconds to add per op, like 2 or 0.5", s)
	case w < 0:
		return 0, fmt.Errorf("weight %s is negative; a weight is 0 or more (the milliseconds a plan pays per op placed against the preference)", s)
	}
	if w == 0 {
		w = 0 // -0 reads as 0
	}
	return w, nil
}

// formatWeight spells w so that parseWeight reads it back exactly.
func formatWeight(w float64) string { return strconv.FormatFloat(w, 'g', -1, 64) }
