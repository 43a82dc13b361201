package spawner

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// MODEL_PRICES is the manager's: checked at start (an error names the
// variable, the model and the field), passed to every worker as given,
// and neither WORKER_ENV nor a spec's env may set it.
func TestModelPricesConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string {
			if k == "REDIS_URL" {
				return "redis://127.0.0.1:1/0"
			}
			return m[k]
		}
	}
	prices := `{"agentvisor": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}`
	c, err := ConfigFromEnv(env(map[string]string{"MODEL_PRICES": prices}))
	if err != nil {
		t.Fatal(err)
	}
	s := New(c, nil, nil, nil, nil)
	if got := s.workerEnv("w1", protocol.WorkerSpec{AgentType: protocol.AgentDroid}, "redis://x"); !slices.Contains(got, "MODEL_PRICES="+prices) {
		t.Fatalf("worker env %v lacks MODEL_PRICES", got)
	}
	if c, err := ConfigFromEnv(env(nil)); err != nil || slices.ContainsFunc(New(c, nil, nil, nil, nil).workerEnv("w1", protocol.WorkerSpec{}, "redis://x"),
		func(v string) bool { return strings.HasPrefix(v, "MODEL_PRICES=") }) {
		t.Fatalf("without MODEL_PRICES: %v", err)
	}
	_, err = ConfigFromEnv(env(map[string]string{"MODEL_PRICES": `{"agentvisor": {"input": 3, "output": 15}}`}))
	if err == nil || !errors.Is(err, protocol.ErrModelPrices) || !strings.Contains(err.Error(), `config: MODEL_PRICES: `) ||
		!strings.Contains(err.Error(), `model "agentvisor": cache_read: required`) {
		t.Fatalf("a price left out: %v", err)
	}
	if _, err := ConfigFromEnv(env(map[string]string{"WORKER_ENV": `{"MODEL_PRICES": "{}"}`})); err == nil || !strings.Contains(err.Error(), "WORKER_ENV: MODEL_PRICES is a variable of the manager's own environment") {
		t.Fatalf("MODEL_PRICES in WORKER_ENV: %v", err)
	}
	if !protocol.ReservedEnv("MODEL_PRICES") {
		t.Fatal("a spec's env may set MODEL_PRICES")
	}
}
