package leaks

import (
	"strconv"
	"strings"
	"time"

	"github.com/ipkeeper/ipkeeper/internal/ipam"
)

// Tracker confirms candidates (leaked handles, gone nodes) seen by two
// observations at least Grace apart. It keeps only when each candidate
// was first seen: losing it (a restart, a failover) only delays a release
// by one grace period. A candidate missing from one observation is
// forgotten, so it must be seen again for a whole grace period.
type Tracker struct {
	// Grace is the least time between the first and the confirming
	// observation.
	Grace time.Duration
	first map[string]time.Time
}

// Observe records one observation made at now of every current candidate
// (by key, see Key) and forgets the candidates it does not list. It
// returns the keys confirmed (first seen at least Grace before now), in
// the order given, and the earliest time one of the others will be
// (zero when none is pending).
func (t *Tracker) Observe(now time.Time, keys []string) (confirmed []string, next time.Time) {
	seen := make(map[string]time.Time, len(keys))
	for _, k := range keys {
		f, ok := t.first[k]
		if !ok {
			f = now
		}
		seen[k] = f
		if due := f.Add(t.Grace); !now.Before(due) {
			confirmed = append(confirmed, k)
		} else if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	t.first = seen
	return confirmed, next
}

// FirstSeen returns when key was first seen, if it is a candidate.
func (t *Tracker) FirstSeen(key string) (time.Time, bool) {
	f, ok := t.first[key]
	return f, ok
}

// Pending is the number of candidates tracked.
func (t *Tracker) Pending() int { return len(t.first) }

// Key identifies one allocation across observations: the handle's ID,
// container, pod UID, creation time and addresses. A handle released and
// allocated again under the same ID (same container and interface) gets
// another Created, so it is another allocation with a grace period of its
// own.
func Key(h ipam.Handle) string {
	var b strings.Builder
	b.WriteString(h.ID)
	b.WriteByte(0)
	b.WriteString(h.ContainerID)
	b.WriteByte(0)
	b.WriteString(h.PodUID)
	b.WriteByte(0)
	b.WriteString(strconv.FormatInt(h.Created.UnixNano(), 10))
	for _, ip := range h.IPs {
		b.WriteByte(0)
		b.WriteString(ip.Pool)
		b.WriteByte('/')
		b.WriteString(ip.Addr.String())
	}
	return b.String()
}
