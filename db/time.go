package db

import "time"

// UnixNano is t in Unix nanoseconds, 0 for the zero time: how records
// store times.
func UnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromUnixNano is the UTC time of ns, the zero time for 0.
func FromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
