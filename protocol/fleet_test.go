package protocol

import (
	"strings"
	"testing"
)

func TestPlacementMatchesHostAndLabels(t *testing.T) {
	labels := map[string]string{"docker": "true", "zone": "a"}
	cases := []struct {
		p    *Placement
		host string
		want bool
	}{
		{nil, "h1", true},
		{&Placement{}, "h1", true},
		{&Placement{Host: "h1"}, "h1", true},
		{&Placement{Host: "h2"}, "h1", false},
		{&Placement{Labels: map[string]string{"docker": "true"}}, "h1", true},
		{&Placement{Labels: map[string]string{"docker": "true", "zone": "b"}}, "h1", false},
		{&Placement{Labels: map[string]string{"gpu": "true"}}, "h1", false},
		{&Placement{Host: "h1", Labels: map[string]string{"zone": "a"}}, "h1", true},
	}
	for _, c := range cases {
		if got := c.p.Matches(c.host, labels); got != c.want {
			t.Errorf("%+v on %s: %v, want %v", c.p, c.host, got, c.want)
		}
	}
}

func TestPlacementIsValidated(t *testing.T) {
	for _, p := range []*Placement{{Host: "a:b"}, {Host: strings.Repeat("h", 65)}, {Labels: map[string]string{"Zone": "a"}}, {Labels: map[string]string{"z": strings.Repeat("v", 257)}}} {
		spec := WorkerSpec{AgentType: AgentClaude, Placement: p}
		if err := spec.Validate(); err == nil || !strings.Contains(err.Error(), "spec.placement") {
			t.Errorf("placement %+v: %v, want an error naming spec.placement", p, err)
		}
	}
	ok := WorkerSpec{AgentType: AgentClaude, Placement: &Placement{Host: "host-1.example", Labels: map[string]string{"docker": "true"}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}
