// Command consumer tails what workers report, the way any service would
// with a Redis client and the protocol's decoders: worker:lifecycle (every
// worker's lifecycle events) and each worker's output stream (its progress
// events and task outputs), found through the workers set and the
// lifecycle stream's "created" events.
//
//	REDIS_URL=redis://consumer:<password>@127.0.0.1:6379/0 go run ./consumer [-from-start] [-idle-exit 5s]
//
// Without REDIS_URL it reads the project's Redis (scripts/redis.sh) as its
// consumer user: REDIS_CONSUMER_URL of the environment or of
// /var/lib/agentvisor/redis/credentials.env.
//
// It reads without a consumer group, so it takes nothing from anyone: any
// number of consumers see every entry. -idle-exit ends it once nothing has
// arrived for that long after its first entry. A Go service can use client.Watcher, which does
// the same; this program spells the protocol out with a plain Redis client,
// as a service in any language would.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

func main() {
	fromStart := flag.Bool("from-start", false, "replay what the streams hold first")
	idleExit := flag.Duration("idle-exit", 0, "exit after this long without an entry, once one came (0: never)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("REDIS_URL")
	var err error
	if url == "" {
		url, err = redisconn.DefaultURL(redisconn.ConsumerURLName)
	}
	var keys protocol.Keys
	if err == nil {
		keys, err = protocol.NewKeys(os.Getenv("WORKER_KEY_PREFIX"))
	}
	if err == nil {
		err = tail(ctx, url, keys, *fromStart, *idleExit, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func tail(ctx context.Context, url string, keys protocol.Keys, fromStart bool, idleExit time.Duration, w io.Writer) error {
	rdb, err := redisconn.Open(url) // redis://, rediss:// or a sentinel URL
	if err != nil {
		return err
	}
	defer rdb.Close()

	// Where each stream is read from: "0-0" replays it; otherwise its
	// current last entry (resolved now: "$" in a loop would skip entries
	// added between two reads).
	cursor := map[string]string{}
	watch := func(stream string, replay bool) error {
		if _, ok := cursor[stream]; ok {
			return nil
		}
		cursor[stream] = "0-0"
		if !replay {
			last, err := rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
			if err != nil {
				return err
			}
			if len(last) == 1 {
				cursor[stream] = last[0].ID
			}
		}
		return nil
	}
	if err := watch(keys.Lifecycle(), fromStart); err != nil {
		return err
	}
	ids, err := rdb.SMembers(ctx, keys.Workers()).Result()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := watch(keys.Output(id), fromStart); err != nil {
			return err
		}
	}

	var lastEntry time.Time // zero until the first entry: a consumer may start before any worker
	for ctx.Err() == nil {
		if idleExit > 0 && !lastEntry.IsZero() && time.Since(lastEntry) > idleExit {
			return nil
		}
		// XREAD takes the stream names, then their ids in the same order.
		names := make([]string, 0, len(cursor))
		for s := range cursor {
			names = append(names, s)
		}
		args := append([]string(nil), names...)
		for _, s := range names {
			args = append(args, cursor[s])
		}
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: args, Block: 500 * time.Millisecond, Count: 100}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, st := range res {
			for _, m := range st.Messages {
				cursor[st.Stream] = m.ID
				lastEntry = time.Now()
				data, err := protocol.EntryData(m.Values)
				if err != nil {
					fmt.Fprintf(w, "%s %s: %v\n", st.Stream, m.ID, err)
					continue
				}
				line, newWorker, err := describe(data)
				if err != nil {
					fmt.Fprintf(w, "%s %s: refused: %v\n", st.Stream, m.ID, err)
					continue
				}
				fmt.Fprintln(w, line)
				if newWorker != "" {
					// A new worker: all its output entries are new.
					if err := watch(keys.Output(newWorker), true); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// describe decodes one entry into a line; for a lifecycle "created" or
// "started" event it also names the worker whose output stream to follow.
func describe(data []byte) (line, newWorker string, err error) {
	_, typ, err := protocol.PeekType(data)
	if err != nil {
		return "", "", err
	}
	switch typ {
	case protocol.TypeLifecycle:
		l, err := protocol.DecodeLifecycle(data)
		if err != nil {
			return "", "", err
		}
		if l.Event == protocol.EventCreated || l.Event == protocol.EventStarted {
			newWorker = l.WorkerID
		}
		return fmt.Sprintf("%s lifecycle %s %s (%s)", l.Timestamp.Format(time.TimeOnly), l.WorkerID, l.Event, l.Source), newWorker, nil
	case protocol.TypeProgress:
		p, err := protocol.DecodeProgress(data)
		if err != nil {
			return "", "", err
		}
		pct := -1
		if p.ProgressPct != nil {
			pct = *p.ProgressPct
		}
		return fmt.Sprintf("%s progress  %s %s %q %d%% %s", p.Timestamp.Format(time.TimeOnly), p.WorkerID, p.RequestID, p.Step, pct, p.Output), "", nil
	case protocol.TypeOutput:
		o, err := protocol.DecodeOutput(data)
		if err != nil {
			return "", "", err
		}
		return fmt.Sprintf("%s output    %s %s %s %s", o.Timestamp.Format(time.TimeOnly), o.WorkerID, o.RequestID, o.Status, o.Result), "", nil
	case protocol.TypePermissionRequest:
		p, err := protocol.DecodePermissionRequest(data)
		if err != nil {
			return "", "", err
		}
		return fmt.Sprintf("%s asks      %s %s %s %s %s", p.Timestamp.Format(time.TimeOnly), p.WorkerID, p.RequestID, p.PermissionID, p.Tool, p.Input), "", nil
	}
	return "", "", fmt.Errorf("unexpected entry type %q", typ)
}
