package envconf

import (
	"strings"
	"testing"
)

// Usage lists every variable with its default and what it does.
func TestUsageListsEveryVariable(t *testing.T) {
	var a, b string
	vars := []Var{
		{Name: "ALPHA", Value: String(&a), Required: true, Doc: "the first"},
		{Name: "BETA_LONGER", Value: String(&b), Default: "5s", Doc: "the second"},
	}
	u := Usage("tool", "does things", vars)
	for _, want := range []string{"tool: does things", "ALPHA        the first [(required)]", "BETA_LONGER  the second [5s]"} {
		if !strings.Contains(u, want) {
			t.Errorf("usage lacks %q:\n%s", want, u)
		}
	}
}
