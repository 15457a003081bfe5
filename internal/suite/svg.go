package suite

import (
	"fmt"
	"strings"
)

// Point is one x of a growth chart: delivered/s and PostgreSQL CPU per
// delivered message.
type Point struct {
	Label     string  // x-axis label ("1,000" partitions, "3" nodes)
	PerSec    float64 // delivered/s; drawn as a bar
	PGUsPerMs float64 // PostgreSQL us per message; drawn as a line
}

// Panel is one chart of the growth figure.
type Panel struct {
	Title  string
	XLabel string
	Points []Point
}

// Chart geometry, in SVG user units.
const (
	panelW   = 360
	panelH   = 260
	plotTop  = 40
	plotBot  = 210
	plotLeft = 30
	plotW    = panelW - 2*plotLeft
)

// GrowthSVG draws the panels side by side: bars for delivered/s, a line
// for PostgreSQL us/msg, each labelled with its value, so the chart reads
// without axes. Each series is scaled to its own maximum in its panel.
// Plain SVG written by hand: no dependency.
func GrowthSVG(panels []Panel) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	width := panelW * len(panels)
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		width, panelH+20, width, panelH+20)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	for i, p := range panels {
		drawPanel(w, p, i*panelW)
	}
	// Legend, once, under the panels.
	y := panelH + 8
	w(`<rect x="%d" y="%d" width="10" height="10" fill="#4a7ebb"/><text x="%d" y="%d">delivered msgs/s</text>`+"\n", plotLeft, y, plotLeft+14, y+9)
	w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#c0392b" stroke-width="2"/><text x="%d" y="%d">PostgreSQL CPU us per message</text>`+"\n",
		plotLeft+140, y+5, plotLeft+160, y+5, plotLeft+164, y+9)
	w("</svg>\n")
	return b.String()
}

func drawPanel(w writer, p Panel, x0 int) {
	w(`<text x="%d" y="18" font-size="13" font-weight="bold">%s</text>`+"\n", x0+plotLeft, esc(p.Title))
	w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`+"\n", x0+plotLeft, plotBot, x0+plotLeft+plotW, plotBot)
	w(`<text x="%d" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x0+plotLeft+plotW/2, plotBot+32, esc(p.XLabel))
	n := len(p.Points)
	if n == 0 {
		w(`<text x="%d" y="%d">no data</text>`+"\n", x0+plotLeft+10, (plotTop+plotBot)/2)
		return
	}
	var maxRate, maxUs float64
	for _, pt := range p.Points {
		maxRate = max(maxRate, pt.PerSec)
		maxUs = max(maxUs, pt.PGUsPerMs)
	}
	slot := float64(plotW) / float64(n)
	barW := slot * 0.5
	h := float64(plotBot - plotTop - 14) // room for the top label
	var line []string
	for i, pt := range p.Points {
		cx := float64(x0+plotLeft) + slot*(float64(i)+0.5)
		bh := 0.0
		if maxRate > 0 {
			bh = pt.PerSec / maxRate * h
		}
		w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7ebb"/>`+"\n", cx-barW/2, float64(plotBot)-bh, barW, bh)
		w(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#1f3f66">%s</text>`+"\n", cx, float64(plotBot)-bh-3, num(pt.PerSec))
		w(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", cx, plotBot+14, esc(pt.Label))
		if maxUs > 0 {
			ly := float64(plotBot) - pt.PGUsPerMs/maxUs*h
			line = append(line, fmt.Sprintf("%.1f,%.1f", cx, ly))
			w(`<circle cx="%.1f" cy="%.1f" r="3" fill="#c0392b"/>`+"\n", cx, ly)
			w(`<text x="%.1f" y="%.1f" fill="#c0392b">%.0f us</text>`+"\n", cx+5, ly-4, pt.PGUsPerMs)
		}
	}
	if len(line) > 1 {
		w(`<polyline points="%s" fill="none" stroke="#c0392b" stroke-width="2"/>`+"\n", strings.Join(line, " "))
	}
}

// esc escapes text for SVG.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// growthPanels builds the two panels of scenario 5 from a report.
func growthPanels(r *Report) []Panel {
	byParts := Panel{Title: "1 node, by partitions", XLabel: "partitions"}
	for _, n := range r.Plan.PartitionSeries() {
		if f, ok := r.figures(growthPartitionsID(n)); ok {
			byParts.Points = append(byParts.Points, Point{Label: num(float64(n)), PerSec: f.delivered, PGUsPerMs: f.pgUs})
		}
	}
	byNodes := Panel{Title: "100 partitions, by nodes", XLabel: "nodes"}
	if f, ok := r.growthOneNode(); ok {
		byNodes.Points = append(byNodes.Points, Point{Label: "1", PerSec: f.delivered, PGUsPerMs: f.pgUs})
	}
	for _, n := range r.Plan.growthPoints() {
		if f, ok := r.figures(growthNodesID(n)); ok {
			byNodes.Points = append(byNodes.Points, Point{Label: fmt.Sprint(n), PerSec: f.delivered, PGUsPerMs: f.pgUs})
		}
	}
	return []Panel{byParts, byNodes}
}
