package web

import (
	"fmt"
	"time"

	"github.com/btk-project/btk/internal/btk"
)

// The usage chart is SVG drawn on the server (docs/usage.md): stacked bars
// per period (accepted, rate-limited, refused), each with a <title>, and the
// same numbers in a table beside it, so the page needs no script and a
// screen reader reads the table.

// chart is one usage chart as the template draws it, in viewBox units.
type chart struct {
	Width, Height int
	// Plot area: bars stand on Base and reach up to Top.
	Left, Top, Base int
	Bars            []chartBar
	// Ticks are the horizontal grid lines with their labels.
	Ticks []chartTick
	// Labels are the period labels under some bars.
	Labels []chartLabel
	Rows   []chartRow // the data table, newest first
	Total  btk.UsageCount
	Max    int64
	Label  string // what the chart shows, for aria-label
}

type chartBar struct {
	X, W     float64
	Segments []chartSegment
	Title    string
}

type chartSegment struct {
	Y, H  float64
	Class string
}

type chartTick struct {
	Y     float64
	Label string
}

type chartLabel struct {
	X    float64
	Text string
}

type chartRow struct {
	Period                         string
	ISO                            string
	Accepted, RateLimited, Refused string
}

// newChart lays out pts (one per period, oldest first).
func newChart(pts []btk.UsageCount, g btk.Granularity) chart {
	c := chart{Width: 640, Height: 220, Left: 48, Top: 12, Base: 190}
	layout, short := "Jan 2", "Jan 2"
	if g == btk.GranularityHour {
		layout, short = "Jan 2 15:00", "15:00"
	}
	for _, p := range pts {
		c.Max = max(c.Max, p.Total())
		c.Total.Accepted += p.Accepted
		c.Total.RateLimited += p.RateLimited
		c.Total.Refused += p.Refused
	}
	scale := niceMax(c.Max)
	plotW := float64(c.Width - c.Left - 8)
	plotH := float64(c.Base - c.Top)
	n := max(len(pts), 1)
	slot := plotW / float64(n)
	gap := min(slot*0.2, 4)
	for i := range 5 { // 0, ¼, ½, ¾, 1 of the scale
		v := scale * int64(i) / 4
		c.Ticks = append(c.Ticks, chartTick{Y: float64(c.Base) - plotH*float64(i)/4, Label: num(int(v))})
	}
	every := max(1, (n+7)/8) // at most about 8 labels
	for i, p := range pts {
		x := float64(c.Left) + slot*float64(i) + gap/2
		b := chartBar{X: x, W: slot - gap, Title: fmt.Sprintf("%s: %s accepted, %s rate-limited, %s refused",
			p.Start.UTC().Format(layout), num(int(p.Accepted)), num(int(p.RateLimited)), num(int(p.Refused)))}
		y := float64(c.Base)
		for _, s := range []struct {
			n     int64
			class string
		}{{p.Accepted, "accepted"}, {p.RateLimited, "limited"}, {p.Refused, "refused"}} {
			if s.n == 0 || scale == 0 {
				continue
			}
			h := max(plotH*float64(s.n)/float64(scale), 1)
			y -= h
			b.Segments = append(b.Segments, chartSegment{Y: y, H: h, Class: s.class})
		}
		c.Bars = append(c.Bars, b)
		if i%every == 0 {
			c.Labels = append(c.Labels, chartLabel{X: x + (slot-gap)/2, Text: p.Start.UTC().Format(short)})
		}
	}
	for i := len(pts) - 1; i >= 0; i-- {
		p := pts[i]
		c.Rows = append(c.Rows, chartRow{
			Period: p.Start.UTC().Format(layout), ISO: p.Start.UTC().Format(time.RFC3339),
			Accepted: num(int(p.Accepted)), RateLimited: num(int(p.RateLimited)), Refused: num(int(p.Refused)),
		})
	}
	return c
}

// niceMax is the top of the scale: at least m, a round number, divisible by 4.
func niceMax(m int64) int64 {
	if m <= 4 {
		return 4
	}
	step := int64(1)
	for step*10 < m {
		step *= 10
	}
	for _, f := range []int64{1, 2, 4, 5, 8, 10} {
		if v := step * f; v >= m && v%4 == 0 {
			return v
		}
	}
	return (m + 3) / 4 * 4
}

// sparkline is a key's last days as small bars, for the keys list.
type sparkline struct {
	BarW  float64
	Bars  []sparkBar
	Total string
	Label string
}

type sparkBar struct {
	X, Y, H float64
	Refused bool // the period had refused uses: drawn in the refused colour
}

const sparkW, sparkH = 70, 20

func newSparkline(pts []btk.UsageCount) sparkline {
	var top, total int64
	for _, p := range pts {
		top = max(top, p.Total())
		total += p.Total()
	}
	s := sparkline{Total: num(int(total)), BarW: max(float64(sparkW)/float64(max(len(pts), 1))-2, 1)}
	s.Label = fmt.Sprintf("%s uses in the last %d days", s.Total, len(pts))
	slot := float64(sparkW) / float64(max(len(pts), 1))
	for i, p := range pts {
		h := 0.0
		if top > 0 && p.Total() > 0 {
			h = max(float64(sparkH-2)*float64(p.Total())/float64(top), 1.5)
		}
		s.Bars = append(s.Bars, sparkBar{X: slot*float64(i) + 1, Y: float64(sparkH) - h, H: h, Refused: p.Refused > 0})
	}
	return s
}
