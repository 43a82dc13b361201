package docker

import (
	"errors"
	"testing"

	"github.com/docker/docker/errdefs"

	"github.com/agentvisor/agentvisor/spawner/engine"
)

// A Docker error is classified by its kind (errdefs), never its text, and
// keeps the engine's own words.
func TestClassifyByKind(t *testing.T) {
	base := errors.New("engine said no")
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"invalid parameter", errdefs.InvalidParameter(base), engine.ErrInvalid},
		{"conflict", errdefs.Conflict(base), engine.ErrConflict},
		{"not found", errdefs.NotFound(base), engine.ErrNotFound},
		{"forbidden", errdefs.Forbidden(base), engine.ErrForbidden},
		{"unauthorized", errdefs.Unauthorized(base), engine.ErrForbidden},
		{"unavailable", errdefs.Unavailable(base), engine.ErrUnavailable},
		{"anything else", base, engine.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Classify(tc.err)
			if !errors.Is(err, tc.want) || !errors.Is(err, base) || err.Error() != "engine said no" {
				t.Fatalf("Classify(%v) = %q: want %v, wrapping the engine's error and its text", tc.err, err, tc.want)
			}
		})
	}
	if Classify(nil) != nil {
		t.Fatal("Classify(nil) is not nil")
	}
}
