package spawner

import (
	"errors"
	"testing"

	"github.com/agentvisor/agentvisor/spawner/engine"

	"github.com/agentvisor/agentvisor/protocol"
)

func TestEngineErrorsAreClassifiedByKind(t *testing.T) {
	base := errors.New("engine said no")
	for _, tc := range []struct {
		name string
		err  error
		want protocol.Code
	}{
		{"invalid parameter", engine.Wrap(engine.ErrInvalid, base), protocol.CodeInvalidCommand},
		{"conflict", engine.Wrap(engine.ErrConflict, base), protocol.CodeConflict},
		{"not found", engine.Wrap(engine.ErrNotFound, base), protocol.CodeNotFound},
		{"forbidden", engine.Wrap(engine.ErrForbidden, base), protocol.CodeForbidden},
		{"unavailable", engine.Wrap(engine.ErrUnavailable, base), protocol.CodeUpstreamUnavailable},
		{"anything else", base, protocol.CodeUpstreamUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := engineError(tc.err, "create container of %s", "w1")
			if err.Code != tc.want {
				t.Fatalf("code %s, want %s", err.Code, tc.want)
			}
			if !errors.Is(err, base) || err.Error() != string(tc.want)+": create container of w1: engine said no" {
				t.Fatalf("error %q does not wrap the engine's", err)
			}
		})
	}
}
