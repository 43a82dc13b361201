package protocol

// Priority orders the shared developer queue. Each priority has a stream
// of its own (Keys.DeveloperInputFor); a developer worker picks the
// stream to read first by a smooth weighted round robin over
// PriorityWeights, then the others highest first. While every queue has
// tasks, high gets 4 reads in 7, normal 2, low 1: higher priorities go
// first, and no low task waits for ever (each queue is first-in
// first-out). A queue that is empty gives its turn to the others.
type Priority string

const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Priorities lists every priority, highest first.
var Priorities = []Priority{PriorityHigh, PriorityNormal, PriorityLow}

// PriorityWeights are the shares of the reads each priority goes first in.
var PriorityWeights = map[Priority]int{PriorityHigh: 4, PriorityNormal: 2, PriorityLow: 1}

// Valid reports whether p is a known priority ("" is normal).
func (p Priority) Valid() bool { return p == "" || PriorityWeights[p] > 0 }

// Or returns p, or normal when p is "".
func (p Priority) Or() Priority {
	if p == "" {
		return PriorityNormal
	}
	return p
}

// PriorityOrder picks which priority's queue a reader tries first, turn
// by turn (a smooth weighted round robin over PriorityWeights), and
// returns the queues in the order to try. The zero value is ready.
type PriorityOrder struct {
	current map[Priority]int
}

// Next returns the priorities to read this turn: the one whose turn it
// is, then the others highest first.
func (o *PriorityOrder) Next() []Priority {
	if o.current == nil {
		o.current = map[Priority]int{}
	}
	total := 0
	var best Priority
	for _, p := range Priorities {
		o.current[p] += PriorityWeights[p]
		total += PriorityWeights[p]
		if best == "" || o.current[p] > o.current[best] {
			best = p
		}
	}
	o.current[best] -= total
	out := []Priority{best}
	for _, p := range Priorities {
		if p != best {
			out = append(out, p)
		}
	}
	return out
}
