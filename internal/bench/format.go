package bench

import (
	"fmt"
	"math"
	"strings"
)

// Thousands formats v with thousands separators and no decimals, as the
// reports of queen-bench and the suite print their figures ("n/a" for NaN
// and infinities).
func Thousands(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
