package protocol

import (
	"errors"
	"testing"
)

func TestNewestPrimary(t *testing.T) {
	a := func(addr string, epoch int64) SentinelAnswer { return SentinelAnswer{Addr: addr, Epoch: epoch} }
	for _, tc := range []struct {
		name    string
		answers []SentinelAnswer
		want    string
		fails   bool
	}{
		{"all agree", []SentinelAnswer{a("p1:1", 3), a("p1:1", 3), a("p1:1", 3)}, "p1:1", false},
		{"the newest epoch over the majority", []SentinelAnswer{a("old:1", 0), a("old:1", 0), a("new:1", 1)}, "new:1", false},
		{"a majority under no epoch", []SentinelAnswer{a("p1:1", 0), a("p1:1", 0), a("p2:1", 0)}, "p1:1", false},
		{"a split under no epoch", []SentinelAnswer{a("p1:1", 0), a("p2:1", 0)}, "", true},
		{"one failing over", []SentinelAnswer{a("p1:1", 2), a("p1:1", 2), {Addr: "p1:1", Epoch: 2, Failing: true}}, "", true},
		{"none", nil, "", true},
	} {
		got, err := NewestPrimary(tc.answers)
		if got != tc.want || (err != nil) != tc.fails {
			t.Errorf("%s: %q, %v; want %q (error: %v)", tc.name, got, err, tc.want, tc.fails)
		}
	}
	if _, err := NewestPrimary([]SentinelAnswer{{Addr: "p:1", Failing: true}}); !errors.Is(err, ErrFailoverUnderWay) {
		t.Errorf("failing over: %v, want ErrFailoverUnderWay", err)
	}
}
