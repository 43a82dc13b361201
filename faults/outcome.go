package faults

import (
	"fmt"
	"sync"
	"time"
)

// outcome is what a case records of itself for its row of FAULTS.md: its
// recovery and detection times, the workers it did not want, its notes,
// and the answers as they stood when its checks ended. The test's
// goroutine and the helpers it starts record into it; Case embeds it, so
// a case's test calls c.Note, c.Recovered and the rest.
type outcome struct {
	logf func(format string, args ...any) // the case's t.Logf

	mu        sync.Mutex
	recovery  string
	recovered *bool // nil: the case records no recovery
	detection string
	unwanted  int
	notes     []string
	settled   map[string][]Answer // the answers when the checks ended
}

// Unwanted counts workers that should not exist (an unrequested
// replacement, a second container for one create) as orphans.
func (o *outcome) Unwanted(n int, why string) {
	if n <= 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unwanted += n
	o.notes = append(o.notes, fmt.Sprintf("%d unwanted: %s", n, why))
}

// Note adds a line to the case's row.
func (o *outcome) Note(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.notes = append(o.notes, fmt.Sprintf(format, args...))
	o.logf(format, args...)
}

// Recovered records the time the case took to recover from its fault.
func (o *outcome) Recovered(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ok := true
	o.recovery, o.recovered = roundDur(max(0, d)), &ok
	o.logf("recovered in %s", o.recovery)
}

// Detection records the time from the fault to the runtime's first
// answer to it (Options.Detected says which).
func (o *outcome) Detection(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.detection = roundDur(max(0, d)) // Redis's clock counts in milliseconds
}

// NotRecovered records that the case did not recover within its bound.
func (o *outcome) NotRecovered(bound time.Duration, why string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ok := false
	o.recovery, o.recovered = "not within "+roundDur(bound), &ok
	o.notes = append(o.notes, why)
	o.logf("not recovered within %s: %s", roundDur(bound), why)
}

// settle keeps a, the answers when the checks ended, unless the case
// settled already; it returns the answers kept.
func (o *outcome) settle(a map[string][]Answer) map[string][]Answer {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.settled == nil {
		o.settled = a
	}
	return o.settled
}

// row is the case's line of FAULTS.md, without its verdict, and the notes
// so far.
func (o *outcome) row(opt Options, begun time.Time, tally Tally, left []Container) (Row, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	row := Row{Case: opt.Name, Fault: opt.Fault, RecoveredMeans: opt.Recovered, DetectedMeans: opt.Detected, Tasks: tally.Sent,
		Lost: tally.Lost, Duplicated: tally.Duplicated, Orphans: len(left) + o.unwanted, Recovery: o.recovery,
		Took: time.Since(begun), Detection: o.detection}
	if row.Recovery == "" {
		row.Recovery = "—"
	}
	if row.Detection == "" {
		row.Detection = "—"
	}
	notes := tally.Notes
	if len(notes) > 6 {
		notes = append(notes[:6:6], fmt.Sprintf("and %d more such", len(notes)-6))
	}
	return row, append(notes, o.notes...)
}

// verdict lists what makes the case fail (lost, duplicated beyond its
// bound of 1+extraAnswers answers, orphans, not recovered) and adds to
// the notes what does not; testFailed is whether the case's test failed.
func (o *outcome) verdict(row Row, tally Tally, notes []string, extraAnswers int, testFailed bool) (failures, _ []string) {
	if row.Lost > 0 {
		failures = append(failures, fmt.Sprintf("%d lost", row.Lost))
	}
	switch {
	case row.Duplicated > 0 && tally.MaxAnswers > 1+extraAnswers:
		failures = append(failures, fmt.Sprintf("%d duplicated (one request answered %d times)", row.Duplicated, tally.MaxAnswers))
	case row.Duplicated > 0:
		notes = append(notes, fmt.Sprintf("%d duplicated, within the case's bound of %d answers per request", row.Duplicated, 1+extraAnswers))
	}
	if row.Orphans > 0 {
		failures = append(failures, fmt.Sprintf("%d orphans", row.Orphans))
	}
	o.mu.Lock()
	notRecovered := o.recovered != nil && !*o.recovered
	o.mu.Unlock()
	if notRecovered {
		failures = append(failures, "not recovered within its bound")
	}
	if testFailed && len(failures) == 0 {
		notes = append(notes, "the case itself failed (see the test log)")
	}
	return failures, notes
}
