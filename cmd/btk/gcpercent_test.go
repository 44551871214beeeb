package main

import "testing"

// btk serve sets its own collector target (DefaultGCPercent) unless the
// operator set gc-percent or GOGC (docs/operating.md).
func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		setting int
		gogc    string
		want    int
	}{
		{0, "", DefaultGCPercent},
		{0, "100", 0}, // GOGC set: Go has applied it, btk sets nothing
		{0, "off", 0},
		{150, "", 150},
		{150, "50", 150}, // the setting beats GOGC
		{-1, "", -1},
	} {
		if got := gcPercent(c.setting, c.gogc); got != c.want {
			t.Errorf("gcPercent(%d, %q) = %d, want %d", c.setting, c.gogc, got, c.want)
		}
	}
}
