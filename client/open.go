package client

import (
	"context"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// Client is the client in one value, made from the environment as every
// component is: the Redis connection, the key prefix, and the commands,
// tasks and fleet reads over them. Its fields may be used directly.
type Client struct {
	Redis    *redis.Client
	Keys     protocol.Keys
	Commands *Commands
	Tasks    *Tasks
	Fleet    *Fleet
}

// Open connects to the runtime's Redis: url, else REDIS_URL, else
// REDIS_CONSUMER_URL of the environment or of the project's credentials
// file (redisconn.CredentialsFile, as workerctl). The key prefix is
// WORKER_KEY_PREFIX (default worker), WAIT's policy the URL's
// (REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT). Bad input is
// INVALID_COMMAND, naming what is wrong.
func Open(url string) (*Client, error) {
	if url == "" {
		url = os.Getenv("REDIS_URL")
	}
	if url == "" {
		var err error
		if url, err = redisconn.DefaultURL(redisconn.ConsumerURLName); err != nil {
			return nil, &Error{protocol.CodeInvalidCommand, err}
		}
	}
	keys, err := protocol.NewKeys(os.Getenv("WORKER_KEY_PREFIX"))
	if err != nil {
		return nil, Errorf(protocol.CodeInvalidCommand, "WORKER_KEY_PREFIX: %v", err)
	}
	wait, err := redisconn.Policy(url)
	if err != nil {
		return nil, Errorf(protocol.CodeInvalidCommand, "%v", err)
	}
	rc, err := redisconn.Open(url)
	if err != nil {
		return nil, Errorf(protocol.CodeInvalidCommand, "Redis URL: %v", err) // the parser's errors never quote the URL
	}
	return &Client{Redis: rc, Keys: keys, Commands: &Commands{Redis: rc, Keys: keys, Wait: wait},
		Tasks: &Tasks{Redis: rc, Keys: keys, Wait: wait}, Fleet: &Fleet{Redis: rc, Keys: keys}}, nil
}

// Close closes the Redis connection.
func (c *Client) Close() error { return c.Redis.Close() }

// Create asks a worker-manager for a worker and returns it once its
// container runs. No manager alive is NO_MANAGER at once; no reply by the
// Commands' Timeout COMMAND_EXPIRED, and the create is never carried out
// after.
func (c *Client) Create(ctx context.Context, spec protocol.WorkerSpec) (protocol.WorkerInfo, error) {
	r, err := c.Commands.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
	if err != nil {
		return protocol.WorkerInfo{}, err
	}
	if r.Worker == nil {
		return protocol.WorkerInfo{}, Errorf(protocol.CodeInternalError, "a create's reply without its worker")
	}
	return *r.Worker, nil
}

// Delete retires a worker.
func (c *Client) Delete(ctx context.Context, workerID string) error {
	_, err := c.Commands.Do(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: workerID})
	return err
}

// Worker is a worker made by NewWorker, for the scope of one function:
// `defer w.Close()` deletes it.
type Worker struct {
	protocol.WorkerInfo
	c *Client
}

// NewWorker is Create, with the worker's Close to defer.
func (c *Client) NewWorker(ctx context.Context, spec protocol.WorkerSpec) (*Worker, error) {
	info, err := c.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &Worker{info, c}, nil
}

// Run sends a task to the worker and awaits its output, calling
// onProgress (when not nil) with each progress event.
func (w *Worker) Run(ctx context.Context, task protocol.Task, onProgress func(protocol.Progress)) (protocol.Output, error) {
	return w.c.Tasks.Run(ctx, w.WorkerID, task, onProgress)
}

// Send puts a task on the worker's input (Tasks.Send): Await, Watch or
// Cancel it with the Client's Tasks.
func (w *Worker) Send(ctx context.Context, task protocol.Task) (Sent, error) {
	return w.c.Tasks.Send(ctx, w.WorkerID, task)
}

// Close deletes the worker, with a context of its own (the caller's may
// have ended: a deferred Close still runs). A worker already gone is no
// error.
func (w *Worker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.c.Delete(ctx, w.WorkerID); err != nil && !IsNotFound(err) {
		return err
	}
	return nil
}
