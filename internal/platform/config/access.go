package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AccessMode says whether new applications are accepted.
type AccessMode string

const (
	ModeOpen       AccessMode = "OPEN"
	ModeTestWindow AccessMode = "TEST_WINDOW"
	ModeClosed     AccessMode = "CLOSED"
)

// parseAccessMode: missing/blank → TEST_WINDOW (restricted opening, the default); OPEN and
// TEST_WINDOW case- and space-insensitively; anything else, a typo included, → CLOSED. A typo
// must never open what was meant to be restricted.
func parseAccessMode(v value) (AccessMode, string) {
	if !v.present || v.blank() {
		if v.present {
			return ModeTestWindow, "blank"
		}
		return ModeTestWindow, ""
	}
	s, _ := v.scalar()
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "OPEN":
		return ModeOpen, ""
	case "TEST_WINDOW":
		return ModeTestWindow, ""
	case "CLOSED":
		return ModeClosed, ""
	}
	return ModeClosed, fmt.Sprintf("%q is not OPEN, TEST_WINDOW or CLOSED", s)
}

// Window is a weekly opening window such as "Mon-Fri 10:00-18:00" in a fixed time zone. The
// zero Window (invalid or blank config) opens nothing.
type Window struct {
	days       [7]bool // indexed by time.Weekday
	start, end int     // minutes since midnight, start < end ≤ 1440
	valid      bool
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// ParseWindow parses "<days> <HH:MM>-<HH:MM>". Days are a comma list of days or day ranges
// ("Mon-Fri", "Mon,Wed,Fri", "Sat-Sun"), or "*" / "daily" for every day. The end may be 24:00;
// it must be after the start (a window does not cross midnight).
func ParseWindow(s string) (Window, error) {
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return Window{}, fmt.Errorf("window %q: want \"<days> <HH:MM>-<HH:MM>\", e.g. \"Mon-Fri 10:00-18:00\"", s)
	}
	var w Window
	if d := strings.ToLower(fields[0]); d == "*" || d == "daily" {
		for i := range w.days {
			w.days[i] = true
		}
	} else {
		for _, part := range strings.Split(d, ",") {
			from, to, isRange := strings.Cut(part, "-")
			a, ok1 := weekdays[from]
			b, ok2 := a, true
			if isRange {
				b, ok2 = weekdays[to]
			}
			if !ok1 || !ok2 {
				return Window{}, fmt.Errorf("window %q: unknown day in %q (use Mon..Sun)", s, part)
			}
			for day := a; ; day = (day + 1) % 7 {
				w.days[day] = true
				if day == b {
					break
				}
			}
		}
	}
	from, to, ok := strings.Cut(fields[1], "-")
	if !ok {
		return Window{}, fmt.Errorf("window %q: want a time range HH:MM-HH:MM", s)
	}
	var err error
	if w.start, err = parseClock(from); err != nil {
		return Window{}, fmt.Errorf("window %q: %w", s, err)
	}
	if w.end, err = parseClock(to); err != nil {
		return Window{}, fmt.Errorf("window %q: %w", s, err)
	}
	if w.end <= w.start {
		return Window{}, fmt.Errorf("window %q: the end must be after the start", s)
	}
	w.valid = true
	return w, nil
}

func parseClock(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(m) != 2 || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("bad time %q (want HH:MM, 00:00..24:00)", s)
	}
	return hh*60 + mm, nil
}

// Contains reports whether t, read in loc, falls inside the window.
func (w Window) Contains(t time.Time, loc *time.Location) bool {
	if !w.valid || loc == nil {
		return false
	}
	t = t.In(loc)
	if !w.days[t.Weekday()] {
		return false
	}
	m := t.Hour()*60 + t.Minute()
	return m >= w.start && m < w.end
}
