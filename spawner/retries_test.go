package spawner

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Which dead worker's task goes back on the input rather than being
// answered.
func TestHandsOn(t *testing.T) {
	a := &answers{cfg: &Config{Retry: protocol.RetryPolicy{Attempts: 3, BackoffMS: []int{10}}}}
	asked := protocol.Task{RequestID: "r", Prompt: "p", Retry: &protocol.RetryPolicy{}}
	asks5 := protocol.Task{RequestID: "r", Prompt: "p", Retry: &protocol.RetryPolicy{Attempts: 5}}
	plain := protocol.Task{RequestID: "r", Prompt: "p"}
	died := retirement{died: true, replacing: true}
	for _, c := range []struct {
		name    string
		kind    protocol.Kind
		task    protocol.Task
		code    protocol.Code
		attempt int
		r       retirement
		want    bool
	}{
		{"long-lived, asked, replacement coming", protocol.KindLongLived, asked, protocol.CodeAgentCrashed, 1, died, true},
		{"long-lived, asked, operator's attempts spent", protocol.KindLongLived, asked, protocol.CodeAgentCrashed, 3, died, false},
		{"long-lived, its own attempts left", protocol.KindLongLived, asks5, protocol.CodeOOMKilled, 4, died, true},
		{"long-lived, did not ask", protocol.KindLongLived, plain, protocol.CodeAgentCrashed, 1, died, false},
		{"long-lived, no replacement", protocol.KindLongLived, asked, protocol.CodeAgentCrashed, 1, retirement{died: true}, false},
		{"long-lived, not retryable", protocol.KindLongLived, asked, protocol.CodeWorkerGone, 1, died, false},
		{"developer, did not ask", protocol.KindDeveloper, plain, protocol.CodeKilled, 2, retirement{}, true},
		{"developer, did not ask, third attempt", protocol.KindDeveloper, plain, protocol.CodeKilled, 3, retirement{}, false},
		{"developer, asked for more", protocol.KindDeveloper, asks5, protocol.CodeKilled, 4, retirement{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := a.handsOn(c.kind, c.task, c.code, c.attempt, c.r); got != c.want {
				t.Errorf("handsOn = %v, want %v", got, c.want)
			}
		})
	}
}

// A worker whose container died with a task in flight: a task that asked
// for retries is not answered but put back on the worker's input, for
// its next incarnation (the same id), which runs it on attempt 2; a task
// that did not ask is answered AGENT_CRASHED. Either way the worker is
// not replaced under another id.
func TestDeadWorkersRetriedTaskGoesToItsNextIncarnation(t *testing.T) {
	for _, asked := range []bool{true, false} {
		name := "asked"
		if !asked {
			name = "not asked"
		}
		t.Run(name, func(t *testing.T) {
			u := newUnit(t, func(c *Config) { c.ReplaceBackoff, c.NetworkMode = time.Millisecond, "host" })
			u.s.inst.images = &images.Builder{Docker: presentImages{}, BaseImage: images.DefaultBaseImage, Keys: u.keys}
			ctx := context.Background()
			u.worker(t, "w", "running", u.now())
			u.rc.HSet(ctx, u.keys.Status("w"), protocol.StatusFieldSpec, `{"agent_type":"claude"}`, protocol.StatusFieldRequestID, "r1")
			task := protocol.NewTask("r1", "p")
			if asked {
				task.Retry = &protocol.RetryPolicy{Attempts: 2}
			}
			doc, _ := task.Encode()
			u.rc.XAdd(ctx, &redis.XAddArgs{Stream: u.keys.Input("w"), Values: protocol.Values(doc)})
			u.rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: protocol.WorkerGroup, Consumer: "w", Streams: []string{u.keys.Input("w"), ">"}, Count: 1})
			u.rc.HSet(ctx, u.keys.Run("r1"), protocol.RunFieldStatus, "running", protocol.RunFieldAttempt, 1)

			retireDied(ctx, u.s.env, u.s, "w", 3, false)

			outs := u.outputs(t, "w")
			by := u.rc.HGet(ctx, u.keys.Status("w"), protocol.StatusFieldReplacedBy).Val()
			if !asked {
				if o, ok := outs["r1"]; !ok || o.Error.Code != protocol.CodeAgentCrashed || o.Attempt != 1 {
					t.Fatalf("the task that did not ask: %+v", outs)
				}
				if by != "" {
					t.Fatalf("replaced by %s", by)
				}
				return
			}
			if len(outs) != 0 {
				t.Fatalf("a task that asked for retries was answered: %+v", outs)
			}
			if by != "" {
				t.Fatalf("replaced by %s: want a new incarnation under its id", by)
			}
			if n := u.rc.HGet(ctx, u.keys.Status("w"), protocol.StatusFieldIncarnation).Val(); n != "2" {
				t.Fatalf("incarnation %q, want 2", n)
			}
			groups, _ := u.rc.XInfoGroups(ctx, u.keys.Input("w")).Result()
			var unread []redis.XMessage
			if len(groups) == 1 {
				unread, _ = u.rc.XRange(ctx, u.keys.Input("w"), "("+groups[0].LastDeliveredID, "+").Result()
			}
			var back protocol.Task
			if len(unread) == 1 {
				data, _ := unread[0].Values["data"].(string)
				back, _ = protocol.DecodeTask([]byte(data))
			}
			if back.RequestID != "r1" {
				t.Fatalf("the worker's input holds %d unread entries, want the task: %+v", len(unread), unread)
			}
			if n, _ := u.s.rdb.LastAttempt(ctx, "r1"); n != 2 {
				t.Fatalf("the task's next attempt is %d, want 2", n)
			}
			// Its last attempt allowed: the next death answers it.
			u.rc.HSet(ctx, u.keys.Run("r1"), protocol.RunFieldAttempt, 2)
			if h := u.s.answers.handsOn(protocol.KindLongLived, task, protocol.CodeAgentCrashed, 2, retirement{died: true, replacing: true}); h {
				t.Fatal("handed on past its attempts")
			}
		})
	}
}

// presentImages is an engine that has every image: a replacement's
// image is found, never built.
type presentImages struct{}

func (presentImages) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	return image.InspectResponse{ID: "sha256:" + ref}, nil
}

func (presentImages) ImageBuild(context.Context, io.Reader, build.ImageBuildOptions) (build.ImageBuildResponse, error) {
	return build.ImageBuildResponse{}, errors.New("presentImages: no builds")
}
