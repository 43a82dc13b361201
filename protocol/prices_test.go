package protocol

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseModelPrices(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		err      string // "" for none: a part of the error's text
	}{
		{"empty gives the defaults", "", ""},
		{"an entry", `{"agentvisor": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}`, ""},
		{"free", `{"local": {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}}`, ""},
		{"not JSON", `agentvisor=3`, "want a JSON object of model ids and prices"},
		{"an array", `[{"input": 1}]`, "want a JSON object of model ids and prices"},
		{"null", `null`, "want a JSON object of model ids and prices"},
		{"a price that is no object", `{"m": 3}`, `model "m": want an object of four numbers`},
		{"a missing price", `{"m": {"input": 3, "output": 15, "cache_read": 0.3}}`, `model "m": cache_write: required`},
		{"a null price", `{"m": {"input": null, "output": 15, "cache_read": 0.3, "cache_write": 1}}`, `model "m": input: required`},
		{"a negative price", `{"m": {"input": -1, "output": 15, "cache_read": 0.3, "cache_write": 1}}`, `model "m": input: is -1, want 0 to 10000`},
		{"per token, not per million", `{"m": {"input": 3, "output": 15000000, "cache_read": 0.3, "cache_write": 1}}`, `output: is 1.5e+07`},
		{"an unknown field", `{"m": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 1, "cache_write_1h": 6}}`, `unknown field "cache_write_1h"`},
		{"a string price", `{"m": {"input": "3", "output": 15, "cache_read": 0.3, "cache_write": 1}}`, `model "m": want an object of four numbers`},
		{"an empty model id", `{"": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 1}}`, "model id \"\": empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseModelPrices(tt.in)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := p.Lookup("claude-sonnet-4-5"); !ok {
					t.Fatal("the defaults are missing")
				}
				return
			}
			if err == nil || !errors.Is(err, ErrModelPrices) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want ErrModelPrices with %q", err, tt.err)
			}
		})
	}
}

func TestModelPricesLookupAndCost(t *testing.T) {
	p, err := ParseModelPrices(`{"claude-sonnet-4-5": {"input": 4, "output": 20, "cache_read": 0.4, "cache_write": 5}, "agentvisor": {"input": 1, "output": 2, "cache_read": 0.5, "cache_write": 1.5}}`)
	if err != nil {
		t.Fatal(err)
	}
	u := Usage{Input: 2000, Output: 80, CacheRead: 9000, CacheCreation: 100}
	for _, tt := range []struct {
		model string
		cost  float64
		ok    bool
	}{
		{"agentvisor", (2000*1 + 80*2 + 9000*0.5 + 100*1.5) / 1e6, true},
		{"claude-sonnet-4-5", (2000*4 + 80*20 + 9000*0.4 + 100*5) / 1e6, true},             // the operator's price over the default
		{"claude-sonnet-4-5-20250929", (2000*4 + 80*20 + 9000*0.4 + 100*5) / 1e6, true},    // a dated snapshot
		{"claude-opus-4-5-20251101", (2000*5 + 80*25 + 9000*0.5 + 100*6.25) / 1e6, true},   // a default
		{"claude-opus-4-1-20250805", (2000*15 + 80*75 + 9000*1.5 + 100*18.75) / 1e6, true}, // not opus-4's 4-5 price
		{"claude-haiku-4-5-20251001", (2000*1 + 80*5 + 9000*0.1 + 100*1.25) / 1e6, true},   // a default
		{"agentvisor-large", (2000*1 + 80*2 + 9000*0.5 + 100*1.5) / 1e6, true},             // extends agentvisor with "-"
		{"agentvisorx", 0, false},   // not with "-": unknown
		{"gpt-5", 0, false},         // unknown
		{"", 0, false},              // no model named
		{"claude-opus-4", 0, false}, // a family, not a model
	} {
		cost, ok := p.Cost(tt.model, u)
		if ok != tt.ok || math.Abs(cost-tt.cost) > 1e-12 {
			t.Errorf("%q: cost %g %v, want %g %v", tt.model, cost, ok, tt.cost, tt.ok)
		}
	}
}
