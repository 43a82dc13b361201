package protocol

import (
	"errors"
	"fmt"
)

// SentinelAnswer is what one sentinel says of a master's primary.
type SentinelAnswer struct {
	Addr    string // host:port
	Epoch   int64  // the configuration epoch it knows the primary under; 0 when it may not say
	Failing bool   // it is failing the master over
}

// ErrFailoverUnderWay: a sentinel is failing the master over. From the
// promotion of a replica to the end of the failover the old primary still
// takes writes, which it drops when it is demoted: no primary is named
// until the failover ends.
var ErrFailoverUnderWay = errors.New("a sentinel is failing the master over")

// NewestPrimary chooses the primary among the sentinels' answers: the
// address named under the newest configuration epoch (a sentinel that has
// not heard of a failover names the old primary under an older one), the
// one most of them name among equals (then the lowest address). It is an
// error while a sentinel is failing the master over, when answers under
// no epoch split without a majority, and when there is no answer.
func NewestPrimary(answers []SentinelAnswer) (string, error) {
	type named struct {
		addr  string
		epoch int64
	}
	votes := map[named]int{}
	for _, a := range answers {
		if a.Failing {
			return "", ErrFailoverUnderWay
		}
		votes[named{a.Addr, a.Epoch}]++
	}
	if len(votes) == 0 {
		return "", errors.New("no sentinel answered")
	}
	var best named
	bestVotes := 0
	for n, v := range votes {
		if n.epoch > best.epoch || (n.epoch == best.epoch && (v > bestVotes || (v == bestVotes && n.addr < best.addr))) {
			best, bestVotes = n, v
		}
	}
	if best.epoch == 0 && len(votes) > 1 && 2*bestVotes <= len(answers) {
		return "", fmt.Errorf("the sentinels disagree on the primary (%d answered): a failover under way", len(answers))
	}
	return best.addr, nil
}
