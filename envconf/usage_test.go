package envconf

import "testing"

// Usage lists every variable with its default, then its Doc as plain
// text wrapped under it.
func TestUsage(t *testing.T) {
	var a, b, c string
	vars := []Var{
		{Name: "ALPHA", Value: String(&a), Required: true, Doc: "the first"},
		{Name: "BETA_LONGER", Value: String(&b), Default: "5s", Doc: "the second, `quoted`, a [link](../x.md#y) and a [`code link`](z.md), " +
			"a `[[user]:password@]` that is no link, and a [bracket] alone; long enough to be wrapped at eighty columns"},
		{Name: "GAMMA", Value: String(&c), DefaultDoc: "`1` for x, `0` otherwise", Doc: "a | b"},
	}
	got := Usage("tool", "does things", vars)
	want := `tool: does things

Configured by the environment only (docs/configuration.md has the same table):
  ALPHA [required]
      the first
  BETA_LONGER [5s]
      the second, quoted, a link and a code link, a [[user]:password@] that is
      no link, and a [bracket] alone; long enough to be wrapped at eighty
      columns
  GAMMA [1 for x, 0 otherwise]
      a | b
`
	if got != want {
		t.Fatalf("usage\n%s\nwant\n%s", got, want)
	}
}
