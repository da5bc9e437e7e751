package explain

import (
	"fmt"
	"math"
	"time"
)

// NoEstimate is the words of an estimate that cannot be made.
const NoEstimate = "no estimate yet"

// About says how far off a time is, roughly: "under a minute", "about 14 min", "about 2 h 5 min".
func About(d time.Duration) string {
	if d < time.Minute {
		return "under a minute"
	}
	return "about " + Duration(d)
}

// Duration is a duration in the words of the estimates: seconds under a minute, else minutes,
// with hours beyond one ("40 s", "9 min", "1 h 20 min").
func Duration(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(math.Round(d.Seconds())))
	}
	m := int(math.Round(d.Minutes()))
	if m < 60 {
		return fmt.Sprintf("%d min", m)
	}
	if m%60 == 0 {
		return fmt.Sprintf("%d h", m/60)
	}
	return fmt.Sprintf("%d h %d min", m/60, m%60)
}
