package client_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
)

// Send a task to the worker WORKER_ID and await its output, printing
// each progress step; the Redis URL and key prefix are the environment's.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := client.Open("") // REDIS_URL, else the project's credentials file
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	sent, err := c.Tasks.Send(ctx, os.Getenv("WORKER_ID"), protocol.Task{ProjectID: "shop", Prompt: "Fix the build"})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := c.Tasks.Await(ctx, sent, func(p protocol.Progress) { fmt.Println(p.Step) }) // ctx's deadline: client.ErrAwaitTimeout
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Status, out.Response)
}
