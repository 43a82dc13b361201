package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Model prices turn token usage into US dollars for an agent that reports
// no cost of its own (Droid): the wrapper prices every model call its
// proxy forwards, so that such a task has a cost, its project's budget
// refuses once spent, and its own max_budget_usd stops it. The operator
// configures them in MODEL_PRICES (the manager passes its value to every
// worker); what it does not name keeps the defaults below.

// EnvModelPrices is the variable that carries the operator's price table,
// a JSON object (ParseModelPrices); the manager's, passed to its workers.
const EnvModelPrices = "MODEL_PRICES"

// ErrModelPrices is wrapped by every error of ParseModelPrices.
var ErrModelPrices = errors.New("protocol: model prices")

// ModelPrice is what one model's tokens cost, in US dollars per million
// tokens of each kind of the usage: input, output, cache reads, and cache
// writes (the usage's cache_creation). Every field is required in
// MODEL_PRICES: a price left out would silently be free.
type ModelPrice struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cache_read"`
	CacheWrite float64 `json:"cache_write"`
}

// Cost is what u costs at p.
func (p ModelPrice) Cost(u Usage) float64 {
	return (float64(u.Input)*p.Input + float64(u.Output)*p.Output +
		float64(u.CacheRead)*p.CacheRead + float64(u.CacheCreation)*p.CacheWrite) / 1e6
}

// ModelPrices maps a model id to its price. A model is found by its id,
// or by the longest id of the table that it extends with "-" (a dated
// snapshot such as claude-sonnet-4-5-20250929 takes claude-sonnet-4-5's
// price).
type ModelPrices map[string]ModelPrice

// Lookup returns the price of model, and whether the table has one.
func (t ModelPrices) Lookup(model string) (ModelPrice, bool) {
	if p, ok := t[model]; ok {
		return p, true
	}
	best, found := "", false
	for id := range t {
		if len(id) > len(best) && strings.HasPrefix(model, id+"-") {
			best, found = id, true
		}
	}
	return t[best], found
}

// Cost returns what u costs on model, and false (and 0) when the table
// has no price for it: its cost is unknown.
func (t ModelPrices) Cost(model string, u Usage) (float64, bool) {
	p, ok := t.Lookup(model)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

// Models returns the table's model ids, sorted.
func (t ModelPrices) Models() []string {
	ids := make([]string, 0, len(t))
	for id := range t {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// maxPricePerMTok bounds a price: a value above it is a unit mistake
// (dollars per token given as per million).
const maxPricePerMTok = 10000

// DefaultModelPrices returns the built-in table: the prices Claude Code
// 2.1.197 computes its own total_cost_usd with (read from the table in
// its bundle: per model family, first-party API, 5-minute cache writes).
// They are defaults to be checked against the vendor's current price
// list, not a quote: MODEL_PRICES overrides any of them, and names the
// models they do not cover (a Droid custom model's own id).
func DefaultModelPrices() ModelPrices {
	var (
		haiku35 = ModelPrice{Input: 0.8, Output: 4, CacheRead: 0.08, CacheWrite: 1}
		haiku45 = ModelPrice{Input: 1, Output: 5, CacheRead: 0.1, CacheWrite: 1.25}
		sonnet  = ModelPrice{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
		opus4   = ModelPrice{Input: 15, Output: 75, CacheRead: 1.5, CacheWrite: 18.75}
		opus45  = ModelPrice{Input: 5, Output: 25, CacheRead: 0.5, CacheWrite: 6.25}
		fable5  = ModelPrice{Input: 10, Output: 50, CacheRead: 1, CacheWrite: 12.5}
	)
	return ModelPrices{
		"claude-3-5-haiku": haiku35, "claude-haiku-4-5": haiku45,
		"claude-3-5-sonnet": sonnet, "claude-3-7-sonnet": sonnet, "claude-sonnet-4-0": sonnet, "claude-sonnet-4-20250514": sonnet,
		"claude-sonnet-4-5": sonnet, "claude-sonnet-4-6": sonnet, "claude-sonnet-5": sonnet,
		"claude-opus-4-0": opus4, "claude-opus-4-20250514": opus4, "claude-opus-4-1": opus4,
		"claude-opus-4-5": opus45, "claude-opus-4-6": opus45, "claude-opus-4-7": opus45, "claude-opus-4-8": opus45,
		"claude-fable-5": fable5, "claude-mythos-5": fable5,
	}
}

// ParseModelPrices reads MODEL_PRICES: a JSON object whose keys are model
// ids and whose values give all four prices, in US dollars per million
// tokens:
//
//	{"claude-sonnet-4-5": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}
//
// The result is the defaults with these entries put over them; "" gives
// the defaults. Unknown fields, a missing or negative price and an empty
// model id are refused, with an error that wraps ErrModelPrices and names
// the model and the field.
func ParseModelPrices(s string) (ModelPrices, error) {
	t := DefaultModelPrices()
	if strings.TrimSpace(s) == "" {
		return t, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil || raw == nil {
		return nil, fmt.Errorf(`%w: want a JSON object of model ids and prices such as {"claude-sonnet-4-5": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}} (US dollars per million tokens)`, ErrModelPrices)
	}
	for _, id := range sortedKeys(raw) {
		if strings.TrimSpace(id) == "" || id != strings.TrimSpace(id) {
			return nil, fmt.Errorf("%w: model id %q: empty or padded with white space", ErrModelPrices, id)
		}
		p, err := parseModelPrice(raw[id])
		if err != nil {
			return nil, fmt.Errorf("%w: model %q: %s", ErrModelPrices, id, err)
		}
		t[id] = p
	}
	return t, nil
}

func parseModelPrice(data json.RawMessage) (ModelPrice, error) {
	var fields map[string]*float64
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return ModelPrice{}, fmt.Errorf("want an object of four numbers: input, output, cache_read, cache_write")
	}
	var p ModelPrice
	dst := map[string]*float64{"input": &p.Input, "output": &p.Output, "cache_read": &p.CacheRead, "cache_write": &p.CacheWrite}
	for _, name := range sortedKeys(fields) {
		if _, ok := dst[name]; !ok {
			return ModelPrice{}, fmt.Errorf("unknown field %q (want input, output, cache_read, cache_write)", name)
		}
	}
	for _, name := range []string{"input", "output", "cache_read", "cache_write"} {
		v, ok := fields[name]
		switch {
		case !ok || v == nil:
			return ModelPrice{}, fmt.Errorf("%s: required (US dollars per million tokens; 0 if free)", name)
		case math.IsNaN(*v) || *v < 0 || *v > maxPricePerMTok:
			return ModelPrice{}, fmt.Errorf("%s: is %g, want 0 to %d US dollars per million tokens", name, *v, maxPricePerMTok)
		}
		*dst[name] = *v
	}
	return p, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
