package client_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// The README's Go example: send a task to a worker and await its output,
// printing each progress step.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	workerID := os.Getenv("WORKER_ID")

	rdb, err := redisconn.Open(os.Getenv("REDIS_URL")) // redis://, rediss:// or redis+sentinel://
	if err != nil {
		fmt.Println(err)
		return
	}
	tasks := &client.Tasks{Redis: rdb, Keys: protocol.Keys{}}
	sent, err := tasks.Send(ctx, workerID, protocol.Task{ProjectID: "shop", Prompt: "Fix the build"})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := tasks.Await(ctx, sent, func(p protocol.Progress) { fmt.Println(p.Step) }) // ctx's deadline: client.ErrAwaitTimeout
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Status, out.Response)
}
