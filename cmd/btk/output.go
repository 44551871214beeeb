package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/btk-project/btk/internal/btk"
	"github.com/btk-project/btk/internal/client"
)

// Output formats (--output).
const (
	formatTable = "table" // for people: tables, key/value blocks, colour on a terminal
	formatJSON  = "json"  // one JSON document with the schema's field names
	formatPlain = "plain" // for scripts: tab-separated, no header; secrets alone
)

// printer is the one renderer of every command's output: data to stdout,
// notices to stderr. Its lipgloss renderer is bound to stdout with a colour
// profile chosen by btk, never detected from the environment, so output off
// a terminal or under NO_COLOR carries no escape code.
type printer struct {
	io     *iostreams
	format string
	now    func() time.Time
	r      *lipgloss.Renderer
	// defaults, when set, are the workspace's default limits, shown for
	// keys without limits of their own.
	defaults *client.Tenant
}

func newPrinter(io *iostreams, format string, now func() time.Time) *printer {
	r := lipgloss.NewRenderer(io.Out)
	r.SetHasDarkBackground(true) // never query the terminal
	if io.color {
		r.SetColorProfile(termenv.ANSI)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	return &printer{io: io, format: format, now: now, r: r}
}

func (p *printer) human() bool { return p.format == formatTable }

// JSON writes v as one indented JSON document.
func (p *printer) JSON(v any) error {
	enc := json.NewEncoder(p.io.Out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonArray writes a JSON array one element at a time, byte for byte as
// JSON writes the whole slice: for lists too long to hold (btk scan).
type jsonArray struct {
	w   io.Writer
	n   int
	buf bytes.Buffer
	enc *json.Encoder
}

func (p *printer) jsonArray() *jsonArray {
	a := &jsonArray{w: p.io.Out}
	a.enc = json.NewEncoder(&a.buf)
	a.enc.SetIndent("  ", "  ") // an element's lines, one level in
	a.enc.SetEscapeHTML(false)
	return a
}

func (a *jsonArray) add(v any) error {
	a.buf.Reset()
	if err := a.enc.Encode(v); err != nil {
		return err
	}
	sep := ",\n  "
	if a.n == 0 {
		sep = "[\n  "
	}
	a.n++
	_, err := fmt.Fprintf(a.w, "%s%s", sep, bytes.TrimSuffix(a.buf.Bytes(), []byte("\n")))
	return err
}

// close ends the array: [] when nothing was added.
func (a *jsonArray) close() error {
	end := "\n]\n"
	if a.n == 0 {
		end = "[]\n"
	}
	_, err := io.WriteString(a.w, end)
	return err
}

// printable makes text from the server safe to write to a terminal: control
// characters other than tab and newline (an escape sequence can retitle the
// window, clear the screen or move the cursor; a carriage return fakes a
// line), bidirectional overrides and the other invisible characters are
// written as Go escapes (btk.Printable, which the dashboard uses too).
// Colour (SGR: ESC [ digits m) passes, as the printer's own styling of a
// cell is colour. btk's own server never sends control characters; a
// hostile or broken one at --server may.
func printable(s string) string {
	if !strings.Contains(s, "\x1b[") {
		return btk.Printable(s)
	}
	var b strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		// ESC is never part of a multi-byte UTF-8 sequence: i is a rune
		// boundary wherever a colour sequence starts.
		if n := sgrLen(s[i:]); n > 0 {
			b.WriteString(btk.Printable(s[start:i]))
			b.WriteString(s[i : i+n])
			i += n - 1
			start = i + 1
		}
	}
	b.WriteString(btk.Printable(s[start:]))
	return b.String()
}

// sgrLen is the length of the colour sequence s starts with, or 0.
func sgrLen(s string) int {
	if !strings.HasPrefix(s, "\x1b[") {
		return 0
	}
	for i := 2; i < len(s); i++ {
		switch c := s[i]; {
		case c == 'm':
			return i + 1
		case c != ';' && (c < '0' || c > '9'):
			return 0
		}
	}
	return 0
}

// Table writes rows under headers: a lipgloss table for people, tab-separated
// lines without the header for -o plain. On a terminal the widest columns
// are cut to fit; Columns says which columns may go first.
func (p *printer) Table(headers []string, rows [][]string) {
	cols := make([]column, len(headers))
	for i, h := range headers {
		cols[i] = column{header: h}
	}
	p.Columns(cols, rows)
}

// column is one column of a table for people, and what may happen to it on
// a terminal too narrow for the whole table (docs/design.md#narrow-terminals).
type column struct {
	header string
	// short, when set, gives a cell's shorter form, used on a narrow
	// terminal before any column is dropped (a key's shared display prefix
	// goes, its hint stays).
	short func(cell string) string
	// drop orders the columns that may be left out on a narrow terminal:
	// the highest goes first; 0 never goes.
	drop int
	// flex columns are cut with an ellipsis before the others are.
	flex bool
}

// Columns writes rows under cols: every column, in full, for -o plain and
// off a terminal; on a terminal a table that fits its width, as gh does:
// shorter forms first, then whole columns of low priority dropped, then
// cells cut with an ellipsis, flexible columns first.
func (p *printer) Columns(cols []column, rows [][]string) {
	safe := make([][]string, len(rows))
	for i, row := range rows {
		safe[i] = make([]string, len(row))
		for j, cell := range row {
			safe[i][j] = printable(cell)
		}
	}
	rows = safe
	if !p.human() {
		for _, row := range rows {
			fmt.Fprintln(p.io.Out, strings.Join(row, "\t"))
		}
		return
	}
	headers := make([]string, len(cols))
	for i, c := range cols {
		headers[i] = c.header
	}
	if w := p.io.outWidth(); w > 0 {
		headers, rows = fitTable(cols, rows, w)
	}
	last := len(headers) - 1
	t := table.New().
		Border(lipgloss.NormalBorder()).
		BorderTop(false).BorderBottom(false).BorderLeft(false).BorderRight(false).
		BorderColumn(false).BorderRow(false).BorderHeader(true).
		BorderStyle(p.r.NewStyle().Faint(true)).
		Headers(headers...).
		Rows(rows...).
		StyleFunc(func(row, col int) lipgloss.Style {
			s := p.r.NewStyle()
			if col != last {
				s = s.PaddingRight(2)
			}
			if row == table.HeaderRow {
				s = s.Bold(true)
			}
			return s
		})
	// Cells are padded to their column's width; trailing blanks help nobody.
	for line := range strings.Lines(t.Render()) {
		fmt.Fprintln(p.io.Out, strings.TrimRight(line, " \n"))
	}
}

// field is one line of a key/value block.
type field struct{ key, value string }

// Fields writes a key/value block describing one object: aligned labels
// for people, "key<TAB>value" lines for -o plain.
func (p *printer) Fields(fields []field) {
	width := 0
	for _, f := range fields {
		width = max(width, len(f.key)+1)
	}
	label := p.r.NewStyle().Faint(true)
	for _, f := range fields {
		f.value = printable(f.value)
		if p.human() {
			fmt.Fprintln(p.io.Out, strings.TrimRight(label.Render(fmt.Sprintf("%-*s", width, f.key+":"))+"  "+f.value, " "))
		} else {
			fmt.Fprintf(p.io.Out, "%s\t%s\n", f.key, f.value)
		}
	}
}

// Object writes one object: v as JSON with -o json, else its key/value block.
func (p *printer) Object(v any, fields []field) error {
	if p.format == formatJSON {
		return p.JSON(v)
	}
	p.Fields(fields)
	return nil
}

// Result writes what a command did: v as JSON with -o json, plain alone on
// a line with -o plain (for scripts: a secret, a count), else what human
// writes for people.
func (p *printer) Result(v any, plain string, human func()) error {
	switch p.format {
	case formatJSON:
		return p.JSON(v)
	case formatPlain:
		_, err := fmt.Fprintln(p.io.Out, plain)
		return err
	}
	human()
	return nil
}

// Secret shows a new plaintext once, set apart from the rest, with the
// warning that it cannot be shown again (on stdout on a terminal, on stderr
// otherwise so that stdout stays data); what names it: "key", "secret".
func (p *printer) Secret(what, plaintext string) {
	key := p.r.NewStyle().Bold(true).Foreground(lipgloss.Color("2"))
	warn := p.r.NewStyle().Foreground(lipgloss.Color("3"))
	msg := "! Copy this " + what + " now: it is shown only once and cannot be shown again."
	if p.io.outTTY {
		fmt.Fprintf(p.io.Out, "\n    %s\n\n%s\n", key.Render(plaintext), warn.Render(msg))
		return
	}
	fmt.Fprintf(p.io.Out, "\n%s\n", plaintext)
	fmt.Fprintln(p.io.ErrOut, msg)
}

// Notice writes a message for people to stderr, when stderr is for people:
// never with -o json or -o plain.
func (p *printer) Notice(format string, args ...any) {
	if p.human() {
		fmt.Fprintf(p.io.ErrOut, format+"\n", args...)
	}
}

// Time renders t: relative ("3 minutes ago", "in 90 days") for people on
// a terminal, RFC 3339 otherwise; none when t is nil.
func (p *printer) Time(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	if p.human() && p.io.outTTY {
		return relativeTime(p.now(), *t)
	}
	return t.Format(time.RFC3339)
}

// Date renders t as Time does, with the date in front of a time a day or
// more to come ("2027-02-21, in 90 days"): an expiry in a key's details,
// where there is room for it.
func (p *printer) Date(t *time.Time, none string) string {
	s := p.Time(t, none)
	if t != nil && p.human() && p.io.outTTY && t.Sub(p.now()) >= 24*time.Hour {
		s = t.Local().Format("2006-01-02") + ", " + s
	}
	return s
}

// Status colours a key status on a terminal.
func (p *printer) Status(s string) string {
	color := map[string]string{"ACTIVE": "2", "EXPIRED": "3", "REVOKED": "1"}[s]
	if color == "" || !p.human() {
		return s
	}
	return p.r.NewStyle().Foreground(lipgloss.Color(color)).Render(s)
}

// relativeTime says how long ago (or in how long) t is from now, in the
// largest whole unit.
func relativeTime(now, t time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var n int
	var unit string
	switch {
	case d < time.Minute:
		if future {
			return "in a few seconds"
		}
		return "just now"
	case d < time.Hour:
		n, unit = int(d/time.Minute), "minute"
	case d < 24*time.Hour:
		n, unit = int(d/time.Hour), "hour"
	case future && d < 2*365*24*time.Hour:
		// To come (an expiry): whole days, rounded, so that --expires-in
		// 90d reads "in 90 days" rather than "in 2 months" (or 89 days).
		n, unit = int((d+12*time.Hour)/(24*time.Hour)), "day"
	case d < 30*24*time.Hour:
		n, unit = int(d/(24*time.Hour)), "day"
	case d < 365*24*time.Hour:
		n, unit = int(d/(30*24*time.Hour)), "month"
	default:
		n, unit = int(d/(365*24*time.Hour)), "year"
	}
	if n != 1 {
		unit += "s"
	}
	if future {
		return fmt.Sprintf("in %d %s", n, unit)
	}
	return fmt.Sprintf("%d %s ago", n, unit)
}

// Column layout of Table: two blanks between columns, and a column is never
// cut below minColumn cells (or its own width, when narrower).
const (
	columnGap = 2
	minColumn = 6
	// flexMin is how narrow a flexible column may be cut before a column
	// of lower priority is dropped instead.
	flexMin = 20
)

// tableWidth is the width of headers and rows laid out with columnGap.
func tableWidth(headers []string, rows [][]string) int {
	widths := columnWidths(headers, rows)
	total := columnGap * (len(widths) - 1)
	for _, w := range widths {
		total += w
	}
	return total
}

func columnWidths(headers []string, rows [][]string) []int {
	widths := make([]int, len(headers))
	for i, h := range headers {
		widths[i] = ansi.StringWidth(h)
	}
	for _, row := range rows {
		for i, cell := range row {
			if i < len(widths) {
				widths[i] = max(widths[i], ansi.StringWidth(cell))
			}
		}
	}
	return widths
}

// fitTable lays out a table for a terminal width columns wide: a table that
// fits is left alone; otherwise the columns' shorter forms are used, then
// columns are dropped (highest drop first) until it fits, then cells are
// cut, the flexible columns' first.
func fitTable(cols []column, rows [][]string, width int) ([]string, [][]string) {
	headers := make([]string, len(cols))
	for i, c := range cols {
		headers[i] = c.header
	}
	if tableWidth(headers, rows) <= width {
		return headers, rows
	}
	out := make([][]string, len(rows))
	for r, row := range rows {
		out[r] = make([]string, len(row))
		for i, cell := range row {
			if i < len(cols) && cols[i].short != nil {
				cell = cols[i].short(cell)
			}
			out[r][i] = cell
		}
	}
	keep := make([]bool, len(cols))
	for i := range keep {
		keep[i] = true
	}
	project := func() ([]string, [][]string, []bool) {
		var h []string
		var flex []bool
		for i, c := range cols {
			if keep[i] {
				h = append(h, c.header)
				flex = append(flex, c.flex)
			}
		}
		rs := make([][]string, len(out))
		for r, row := range out {
			for i, cell := range row {
				if i < len(keep) && keep[i] {
					rs[r] = append(rs[r], cell)
				}
			}
		}
		return h, rs, flex
	}
	h, rs, flex := project()
	// A column is dropped only while the table would not fit even with its
	// flexible columns cut down to flexMin cells.
	needed := func() int {
		total := columnGap * (len(h) - 1)
		for i, w := range columnWidths(h, rs) {
			if flex[i] {
				w = min(w, flexMin)
			}
			total += w
		}
		return total
	}
	for needed() > width {
		next := -1
		for i, c := range cols {
			if keep[i] && c.drop > 0 && (next < 0 || c.drop > cols[next].drop) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		keep[next] = false
		h, rs, flex = project()
	}
	return cutColumns(h, rs, width, flex)
}

// fitColumns truncates cells, with an ellipsis, so that the table fits in
// width columns: the widest column gives way first, as gh does, until all
// fit or every column is at its minimum. Only for a terminal: piped output
// keeps every character.
func fitColumns(headers []string, rows [][]string, width int) ([]string, [][]string) {
	return cutColumns(headers, rows, width, nil)
}

// cutColumns is fitColumns where the columns marked in flex give way first,
// widest first, before any other is cut.
func cutColumns(headers []string, rows [][]string, width int, flex []bool) ([]string, [][]string) {
	widths := columnWidths(headers, rows)
	total := columnGap * (len(widths) - 1)
	for _, w := range widths {
		total += w
	}
	cut := false
	for _, onlyFlex := range []bool{true, false} {
		for total > width {
			widest := -1
			for i, w := range widths {
				if onlyFlex && (i >= len(flex) || !flex[i]) {
					continue
				}
				if widest < 0 || w > widths[widest] {
					widest = i
				}
			}
			if widest < 0 || widths[widest] <= minColumn {
				break
			}
			widths[widest]--
			total--
			cut = true
		}
	}
	if !cut {
		return headers, rows
	}
	trunc := func(s string, w int) string {
		if ansi.StringWidth(s) <= w {
			return s
		}
		return ansi.Truncate(s, w, "…")
	}
	outHeaders := make([]string, len(headers))
	for i, h := range headers {
		outHeaders[i] = trunc(h, widths[i])
	}
	outRows := make([][]string, len(rows))
	for r, row := range rows {
		outRows[r] = make([]string, len(row))
		for i, cell := range row {
			if i < len(widths) {
				cell = trunc(cell, widths[i])
			}
			outRows[r][i] = cell
		}
	}
	return outHeaders, outRows
}
