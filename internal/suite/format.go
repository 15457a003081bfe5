package suite

import (
	"fmt"
	"strings"

	"queen-node/internal/bench"
)

// num formats with thousands separators and no decimals.
func num(v float64) string { return bench.Thousands(v) }

// ms formats milliseconds with precision that suits the size.
func ms(v float64) string {
	switch {
	case v >= 100:
		return num(v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// ratio is b/a with two decimals, "n/a" when a is 0.
func ratio(b, a float64) string {
	if a == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", b/a)
}

// small formats a figure that may be below 1 (cores, calls/s).
func small(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return num(v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// verdict is the check column: "pass", or what failed.
func verdict(f figures) string {
	if f.ok {
		return "pass"
	}
	var why []string
	if f.lost > 0 {
		why = append(why, fmt.Sprintf("%s lost", num(float64(f.lost))))
	}
	if f.dup > 0 {
		why = append(why, fmt.Sprintf("%s duplicate", num(float64(f.dup))))
	}
	if f.outOfOrder > 0 {
		why = append(why, fmt.Sprintf("%s out of order", num(float64(f.outOfOrder))))
	}
	if f.serverErrors > 0 {
		why = append(why, fmt.Sprintf("%s 5xx", num(float64(f.serverErrors))))
	}
	if len(why) == 0 {
		why = append(why, "see JSON")
	}
	return "**FAIL**: " + strings.Join(why, ", ")
}
