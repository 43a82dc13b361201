package docker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/system"

	"github.com/agentvisor/agentvisor/testkit"
)

type infoFunc func(context.Context) (system.Info, error)

func (f infoFunc) Info(ctx context.Context) (system.Info, error) { return f(ctx) }

// A manager on an engine without live-restore says what a restart of
// dockerd then costs; one on an engine with it, or that does not answer,
// says nothing of it.
func TestWarnsWhenTheEngineLacksLiveRestore(t *testing.T) {
	for _, tc := range []struct {
		name string
		info system.Info
		err  error
		warn bool
	}{{"without", system.Info{Name: "e"}, nil, true}, {"with", system.Info{LiveRestoreEnabled: true}, nil, false}, {"no answer", system.Info{}, errors.New("down"), false}} {
		t.Run(tc.name, func(t *testing.T) {
			var logBuf testkit.SyncBuffer
			WarnIfNoLiveRestore(context.Background(), infoFunc(func(context.Context) (system.Info, error) { return tc.info, tc.err }), slog.New(slog.NewJSONHandler(&logBuf, nil)))
			if said := strings.Contains(logBuf.String(), "without live-restore"); said != tc.warn {
				t.Fatalf("warned: %v, want %v; log: %s", said, tc.warn, logBuf.String())
			}
		})
	}
}

// A gVisor manager on an engine without the runtime says so at start.
func TestWarnsWhenTheEngineLacksTheRuntime(t *testing.T) {
	for _, tc := range []struct {
		name string
		info system.Info
		warn bool
	}{
		{"without", system.Info{Runtimes: map[string]system.RuntimeWithStatus{"runc": {}}}, true},
		{"with", system.Info{Runtimes: map[string]system.RuntimeWithStatus{"runc": {}, "runsc": {}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logBuf testkit.SyncBuffer
			WarnIfNoRuntime(context.Background(), infoFunc(func(context.Context) (system.Info, error) { return tc.info, nil }), "runsc", slog.New(slog.NewJSONHandler(&logBuf, nil)))
			if said := strings.Contains(logBuf.String(), "has no runtime runsc"); said != tc.warn {
				t.Fatalf("said: %v, want %v; log: %s", said, tc.warn, logBuf.String())
			}
		})
	}
}
