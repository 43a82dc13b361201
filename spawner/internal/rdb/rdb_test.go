package rdb

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

// testRDB is an RDB with its client at hand, for the tests' own reads
// and writes of the keys the families keep.
type testRDB struct {
	*RDB
	c redis.Cmdable
}

func newRDB(t *testing.T) (*testRDB, context.Context) {
	t.Helper()
	c := testkit.NewRedisClient(t)
	return &testRDB{RDB: New(c, protocol.Keys{Prefix: "rdbtest"}), c: c}, context.Background()
}

var t0 = time.UnixMilli(1_800_000_000_000)

// admit1 admits on a fleet of one host, h1, with max slots (queue mode,
// or replace mode for a replacement).
func admit1(r *testRDB, ctx context.Context, id string, now time.Time, lease time.Duration, max int, replacement bool) (bool, int, error) {
	mode := AdmitQueue
	if replacement {
		mode = AdmitReplace
	}
	a, err := r.Admit(ctx, id, now, lease, mode, "h1", []HostSlots{{"h1", max}})
	return a.OK, a.Pos, err
}

func TestAdmissionIsFIFOWithinTheLimit(t *testing.T) {
	r, ctx := newRDB(t)
	lease := 15 * time.Second
	// Two slots; three creates queue in order.
	for i, want := range []bool{true, true, false} {
		ok, _, err := admit1(r, ctx, fmt.Sprintf("c%d", i), t0, lease, 2, false)
		if err != nil || ok != want {
			t.Fatalf("create %d admitted=%v err=%v, want %v", i, ok, err, want)
		}
	}
	// A fourth queues behind the third, even once a slot frees: FIFO.
	if ok, pos, _ := admit1(r, ctx, "c3", t0, lease, 2, false); ok || pos != 1 {
		t.Fatalf("c3 admitted=%v pos=%d", ok, pos)
	}
	if ok, _ := r.Join(ctx, "c0"); !ok {
		t.Fatal("c0 could not join")
	}
	r.c.SRem(ctx, r.Keys.Workers(), "c0") // c0 retired: a slot frees
	if ok, _, _ := admit1(r, ctx, "c3", t0, lease, 2, false); ok {
		t.Fatal("c3 overtook c2")
	}
	if ok, _, _ := admit1(r, ctx, "c2", t0, lease, 2, false); !ok {
		t.Fatal("c2 at the head with a free slot was not admitted")
	}
	// Admitting again (a retried script) keeps one slot.
	if ok, _, _ := admit1(r, ctx, "c2", t0, lease, 2, false); !ok || r.c.ZCard(ctx, ctlplane.CreatingKey(r.Keys)).Val() != 2 {
		t.Fatalf("re-admit: ok=%v creating=%d", ok, r.c.ZCard(ctx, ctlplane.CreatingKey(r.Keys)).Val())
	}
}

// A create whose manager died leaves the queue, and frees its slot, when
// its lease runs out: no cleanup waits on the dead process.
func TestAdmissionLeasesRunOut(t *testing.T) {
	r, ctx := newRDB(t)
	lease := 15 * time.Second
	admit1(r, ctx, "admitted-then-dead", t0, lease, 1, false)
	if ok, pos, _ := admit1(r, ctx, "queued-then-dead", t0, lease, 1, false); ok || pos != 0 {
		t.Fatalf("second create: admitted=%v pos=%d", ok, pos)
	}
	admit1(r, ctx, "live", t0, lease, 1, false)
	later := t0.Add(lease + time.Millisecond)
	ok, _, err := admit1(r, ctx, "live", later, lease, 1, false)
	if err != nil || !ok {
		t.Fatalf("after both leases ran out: admitted=%v err=%v", ok, err)
	}
	if got := r.c.HKeys(ctx, r.Keys.Placement()).Val(); len(got) != 1 || got[0] != "live" {
		t.Errorf("placements after the leases ran out: %v, want only live", got)
	}
	if n := r.c.LLen(ctx, ctlplane.CreationQueueKey(r.Keys)).Val(); n != 0 {
		t.Errorf("%d creates left in the queue", n)
	}
	// A lost slot lease cannot join.
	if ok, _ := r.Join(ctx, "admitted-then-dead"); ok {
		t.Error("a create whose slot lease ran out joined the workers set")
	}
	// Renewal keeps a lease; a lost one says so.
	if ok, _ := r.RenewCreating(ctx, "live", later, lease); !ok {
		t.Error("renewal of a live slot lease failed")
	}
	if ok, _ := r.RenewCreating(ctx, "admitted-then-dead", later, lease); ok {
		t.Error("renewal of a lost slot lease succeeded")
	}
}

func TestReplacementTakesItsPredecessorsSlot(t *testing.T) {
	r, ctx := newRDB(t)
	admit1(r, ctx, "a", t0, time.Minute, 1, false)
	r.Join(ctx, "a")
	r.BeginRetire(ctx, "a", "dead", t0, time.Minute)
	if ok, _, _ := admit1(r, ctx, "b", t0, time.Minute, 1, false); ok {
		t.Fatal("a plain create took the retiring worker's slot")
	}
	if ok, _, _ := admit1(r, ctx, "a-repl", t0, time.Minute, 1, true); !ok {
		t.Fatal("the replacement was not admitted")
	}
}

func TestRetirementHasOneOwnerAndIsTakenOverWhenItsLeaseRunsOut(t *testing.T) {
	r, ctx := newRDB(t)
	r.c.SAdd(ctx, r.Keys.Workers(), "w")
	lease := 15 * time.Second
	if owns, takeover, _ := r.BeginRetire(ctx, "w", "deleted", t0, lease); !owns || takeover {
		t.Fatalf("first: owns=%v takeover=%v", owns, takeover)
	}
	if owns, _, _ := r.BeginRetire(ctx, "w", "died", t0.Add(time.Second), lease); owns {
		t.Fatal("a second caller owns a live retirement")
	}
	stale, _ := r.StaleRetirements(ctx, t0.Add(lease+time.Millisecond))
	if len(stale) != 1 || stale[0] != "w" {
		t.Fatalf("stale retirements %v", stale)
	}
	if owns, takeover, _ := r.BeginRetire(ctx, "w", "takeover", t0.Add(lease+time.Millisecond), lease); !owns || !takeover {
		t.Fatalf("takeover: owns=%v takeover=%v", owns, takeover)
	}
	// A session held by the worker is released; the worker leaves Retiring.
	r.c.HSet(ctx, r.Keys.Session(protocol.AgentClaude, "p"), protocol.SessionFieldWorkerID, "w", protocol.SessionFieldSessionID, "s1")
	if err := r.EndRetire(ctx, "w", protocol.KindLongLived, protocol.AgentClaude, "p", time.Now()); err != nil {
		t.Fatal(err)
	}
	if h := r.c.HGetAll(ctx, r.Keys.Session(protocol.AgentClaude, "p")).Val(); h[protocol.SessionFieldWorkerID] != "" || h[protocol.SessionFieldSessionID] != "s1" {
		t.Errorf("session after retirement %v", h)
	}
	if n := r.c.ZCard(ctx, ctlplane.RetiringKey(r.Keys)).Val(); n != 0 {
		t.Errorf("%d retirements left", n)
	}
	if ttl := r.c.TTL(ctx, r.Keys.Status("w")).Val(); ttl != -2 && (ttl <= 0 || ttl > DefaultRetention) {
		t.Errorf("status hash TTL %v", ttl)
	}
}

func TestBusySeesEveryTaskInFlight(t *testing.T) {
	r, ctx := newRDB(t)
	input := r.Keys.Input("w")
	busy := func() Busy {
		t.Helper()
		b, err := r.Busy(ctx, "w", input, protocol.WorkerGroup)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := busy(); b != BusyEnding {
		t.Fatalf("not in the workers set: %q", b)
	}
	r.c.SAdd(ctx, r.Keys.Workers(), "w", "d1", "d2")
	if b := busy(); b != NotBusy {
		t.Fatalf("no stream: %q", b)
	}
	r.EnsureGroup(ctx, input, protocol.WorkerGroup)
	if b := busy(); b != NotBusy {
		t.Fatalf("empty input: %q", b)
	}
	r.c.XAdd(ctx, &redis.XAddArgs{Stream: input, Values: map[string]any{"data": "{}"}})
	if b := busy(); b != BusyWaiting {
		t.Fatalf("undelivered task: %q", b)
	}
	msgs, _ := r.ReadNew(ctx, input, protocol.WorkerGroup, "w", 1, -1)
	if b := busy(); b != BusyHeld {
		t.Fatalf("read, not acknowledged: %q", b)
	}
	r.Ack(ctx, input, protocol.WorkerGroup, msgs[0].ID)
	if b := busy(); b != NotBusy {
		t.Fatalf("acknowledged: %q", b)
	}
	r.c.HSet(ctx, r.Keys.Status("w"), protocol.StatusFieldState, string(protocol.WorkerBusy))
	if b := busy(); b != BusyTask {
		t.Fatalf("status busy: %q", b)
	}
	r.c.HSet(ctx, r.Keys.Status("w"), protocol.StatusFieldState, string(protocol.WorkerIdle), protocol.StatusFieldRequestID, "r1")
	if b := busy(); b != BusyTask {
		t.Fatalf("request in flight: %q", b)
	}
	r.c.HSet(ctx, r.Keys.Status("w"), protocol.StatusFieldState, string(protocol.WorkerStopping), protocol.StatusFieldRequestID, "")
	if b := busy(); b != BusyEnding {
		t.Fatalf("shutting down: %q", b)
	}
	// Developer workers: the shared queue's held entries count per consumer.
	dev := r.Keys.DeveloperInput()
	r.EnsureGroup(ctx, dev, protocol.DeveloperGroup)
	r.c.XAdd(ctx, &redis.XAddArgs{Stream: dev, Values: map[string]any{"data": "{}"}})
	r.ReadNew(ctx, dev, protocol.DeveloperGroup, "d1", 1, -1)
	if b, _ := r.Busy(ctx, "d1", dev, protocol.DeveloperGroup); b != BusyHeld {
		t.Fatalf("developer holding a task: %q", b)
	}
	if b, _ := r.Busy(ctx, "d2", dev, protocol.DeveloperGroup); b != NotBusy {
		t.Fatalf("another developer: %q", b)
	}
}

func TestAnswerRequeueAndMoveAreIdempotent(t *testing.T) {
	r, ctx := newRDB(t)
	dev := r.Keys.DeveloperInput()
	r.EnsureGroup(ctx, dev, protocol.DeveloperGroup)
	doc, _ := protocol.NewTask("r1", "hi").Encode()
	r.c.XAdd(ctx, &redis.XAddArgs{Stream: dev, Values: protocol.Values(doc)})
	held, _ := r.ReadNew(ctx, dev, protocol.DeveloperGroup, "d1", 1, -1)
	for i, want := range []int{1, 0} { // a retry of the same requeue moves nothing
		n, err := r.Requeue(ctx, "r1", dev, protocol.DeveloperGroup, held[0])
		if err != nil || n != want {
			t.Fatalf("requeue %d: n=%d err=%v, want %d", i, n, err, want)
		}
	}
	if n := r.c.XLen(ctx, dev).Val(); n != 2 {
		t.Fatalf("%d entries on the queue, want the original and one copy", n)
	}
	out := r.Keys.DeveloperOutput()
	o := protocol.Output{RequestID: "r1", WorkerID: "d1", Status: protocol.StatusFailed, Error: protocol.NewError(protocol.CodeKilled, "x"), Timestamp: t0}
	for i, want := range []bool{true, false} {
		ok, err := r.Answer(ctx, o, out, dev, protocol.DeveloperGroup, "", t0)
		if err != nil || ok != want {
			t.Fatalf("answer %d: %v %v", i, ok, err)
		}
	}
	if n := r.c.XLen(ctx, out).Val(); n != 1 {
		t.Fatalf("%d outputs, want 1", n)
	}
	in, to := r.Keys.Input("a"), r.Keys.Input("b")
	id := r.c.XAdd(ctx, &redis.XAddArgs{Stream: in, Values: protocol.Values(doc)}).Val()
	m := redis.XMessage{ID: id, Values: protocol.Values(doc)}
	for i, want := range []bool{true, false} {
		ok, err := r.Move(ctx, in, to, m, "")
		if err != nil || ok != want {
			t.Fatalf("move %d: %v %v", i, ok, err)
		}
	}
	if a, b := r.c.XLen(ctx, in).Val(), r.c.XLen(ctx, to).Val(); a != 0 || b != 1 {
		t.Fatalf("after the move: %d and %d entries", a, b)
	}
}

func TestLeaseHasOneHolder(t *testing.T) {
	r, ctx := newRDB(t)
	if ok, _ := r.TakeLease(ctx, ctlplane.LeaderLease, "m1", time.Second); !ok {
		t.Fatal("m1 could not take a free lease")
	}
	if ok, _ := r.TakeLease(ctx, ctlplane.LeaderLease, "m2", time.Second); ok {
		t.Fatal("m2 took m1's lease")
	}
	if ok, _ := r.TakeLease(ctx, ctlplane.LeaderLease, "m1", time.Second); !ok {
		t.Fatal("m1 could not renew")
	}
	r.ReleaseLease(ctx, ctlplane.LeaderLease, "m2") // not the holder: no effect
	if h, _ := r.LeaseHolder(ctx, ctlplane.LeaderLease); h != "m1" {
		t.Fatalf("holder %q", h)
	}
	r.ReleaseLease(ctx, ctlplane.LeaderLease, "m1")
	if ok, _ := r.TakeLease(ctx, ctlplane.LeaderLease, "m2", time.Second); !ok {
		t.Fatal("m2 could not take a released lease")
	}
}

func TestTrimKeepsEveryTaskNotYetDone(t *testing.T) {
	r, ctx := newRDB(t)
	in := r.Keys.DeveloperInput()
	r.EnsureGroup(ctx, in, protocol.DeveloperGroup)
	for i := 0; i < 5; i++ {
		r.c.XAdd(ctx, &redis.XAddArgs{Stream: in, Values: map[string]any{"data": "{}"}})
	}
	if n, _ := r.TrimInput(ctx, in, protocol.DeveloperGroup); n != 0 {
		t.Fatalf("trimmed %d undelivered entries", n)
	}
	read, _ := r.ReadNew(ctx, in, protocol.DeveloperGroup, "d1", 3, -1) // 3 delivered
	r.Ack(ctx, in, protocol.DeveloperGroup, read[0].ID)
	r.Ack(ctx, in, protocol.DeveloperGroup, read[2].ID) // read[1] still held
	n, err := r.TrimInput(ctx, in, protocol.DeveloperGroup)
	if err != nil || n != 1 {
		t.Fatalf("trimmed %d (%v), want only the first (done) entry", n, err)
	}
	if l := r.c.XLen(ctx, in).Val(); l != 4 {
		t.Fatalf("%d entries left, want the held one, the done one after it and two unread", l)
	}
	r.Ack(ctx, in, protocol.DeveloperGroup, read[1].ID)
	// The group's last delivered entry itself is kept (trimming stops
	// below it).
	if n, _ := r.TrimInput(ctx, in, protocol.DeveloperGroup); n != 1 {
		t.Fatalf("trimmed %d after the held entry was done, want 1", n)
	}
	if l := r.c.XLen(ctx, in).Val(); l != 3 {
		t.Fatalf("%d entries left, want the last delivered and two unread", l)
	}
}

// Worker users come back after Redis loses them (a restart: ACL users are
// not in the append-only file), with the same password, which Redis never
// stores in clear.
func TestWorkerUsersAreRestored(t *testing.T) {
	r, ctx := newRDB(t)
	if err := r.SetWorkerUser(ctx, "w1", "s3cret-pass", UserScope{Kind: protocol.KindLongLived}); err != nil {
		t.Fatal(err)
	}
	if v := r.c.HGet(ctx, ctlplane.WorkerUsersKey(r.Keys), "w1").Val(); strings.Contains(v, "s3cret") {
		t.Fatalf("the password is recorded in clear: %q", v)
	}
	r.c.ACLDelUser(ctx, r.WorkerUser("w1")) // lost, as in a restart
	if n, err := r.RestoreWorkerUsers(ctx); err != nil || n != 1 {
		t.Fatalf("restored %d (%v), want 1", n, err)
	}
	if n, _ := r.RestoreWorkerUsers(ctx); n != 0 {
		t.Fatalf("restored %d users that exist", n)
	}
	opt := r.c.(*redis.Client).Options()
	wc := redis.NewClient(&redis.Options{Addr: opt.Addr, Username: r.WorkerUser("w1"), Password: "s3cret-pass"})
	defer wc.Close()
	if err := wc.HSet(ctx, r.Keys.Status("w1"), "x", "1").Err(); err != nil {
		t.Fatalf("the restored user: %v", err)
	}
	if err := r.DeleteWorkerUser(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.RestoreWorkerUsers(ctx); n != 0 || r.c.HLen(ctx, ctlplane.WorkerUsersKey(r.Keys)).Val() != 0 {
		t.Fatal("a deleted user came back")
	}
}

func TestDrainMovesBackOnlyWhatTheLostHostHadNotServed(t *testing.T) {
	r, ctx := newRDB(t)
	host, shared, group := "rdbtest:commands:host:h2", "rdbtest:commands", protocol.ManagerGroup
	r.c.XGroupCreateMkStream(ctx, host, group, "0")
	for _, doc := range []string{`{"n":"served"}`, `{"n":"held"}`, `{"n":"unread"}`} {
		if err := r.AddEntry(ctx, host, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	read, err := r.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "m2", Streams: []string{host, ">"}, Count: 2}).Result()
	if err != nil || len(read[0].Messages) != 2 {
		t.Fatalf("read: %v %v", read, err)
	}
	r.Ack(ctx, host, group, read[0].Messages[0].ID) // served and answered; the second is held, the third never read
	n, err := r.Drain(ctx, host, shared, group)
	if err != nil || n != 3 {
		t.Fatalf("Drain = %d, %v; want the 3 entries gone from the host's stream", n, err)
	}
	moved, _ := r.c.XRange(ctx, shared, "-", "+").Result()
	var got []string
	for _, m := range moved {
		data, _ := protocol.EntryData(m.Values)
		got = append(got, string(data))
	}
	if strings.Join(got, " ") != `{"n":"held"} {"n":"unread"}` {
		t.Errorf("moved back to the shared stream: %v; want the held and the unread entries only", got)
	}
	if left := r.c.XLen(ctx, host).Val(); left != 0 {
		t.Errorf("%d entries left on the lost host's stream", left)
	}
}

// The paused set of a host follows every write of a worker's container
// state, and SyncPaused makes it true again whatever was written around
// it.
func TestPausedSetFollowsTheStatus(t *testing.T) {
	r, ctx := newRDB(t)
	paused := func(host string) []string {
		t.Helper()
		ids, err := r.Paused(ctx, host)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	r.c.SAdd(ctx, r.Keys.Workers(), "w1", "w2")
	write := func(id, host string, c protocol.ContainerStatus) {
		t.Helper()
		if err := r.WriteStatus(ctx, id, host, t0, map[string]any{protocol.StatusFieldContainer: string(c)}); err != nil {
			t.Fatal(err)
		}
	}
	write("w1", "h1", protocol.ContainerPaused)
	write("w2", "h1", protocol.ContainerRunning)
	if got := paused("h1"); len(got) != 1 || got[0] != "w1" {
		t.Fatalf("paused on h1: %v", got)
	}
	if got := paused("h2"); len(got) != 0 {
		t.Fatalf("paused on h2: %v", got)
	}
	// A write without the container's state leaves the set alone.
	if err := r.WriteStatus(ctx, "w1", "h1", t0, map[string]any{protocol.StatusFieldHealth: "healthy"}); err != nil {
		t.Fatal(err)
	}
	if got := paused("h1"); len(got) != 1 {
		t.Fatalf("paused after a health write: %v", got)
	}
	write("w1", "h1", protocol.ContainerRunning)
	if got := paused("h1"); len(got) != 0 {
		t.Fatalf("paused after the unpause: %v", got)
	}
	if _, err := r.Started(ctx, "w2", "h1", t0, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning)},
		protocol.Lifecycle{WorkerID: "w2", Event: protocol.EventCreated, Source: protocol.SourceSpawner, Timestamp: t0}); err != nil {
		t.Fatal(err)
	}

	// Drift: a hash written by hand, a member retired with its id left.
	r.c.HSet(ctx, r.Keys.Status("w2"), protocol.StatusFieldContainer, string(protocol.ContainerPaused))
	r.c.SAdd(ctx, ctlplane.HostPausedKey(r.Keys, "h1"), "gone")
	if err := r.SyncPaused(ctx, "h1", append(paused("h1"), "w1", "w2")); err != nil {
		t.Fatal(err)
	}
	if got := paused("h1"); len(got) != 1 || got[0] != "w2" {
		t.Fatalf("paused after the repair: %v", got)
	}
	r.c.SRem(ctx, r.Keys.Workers(), "w2") // retired, its hash not yet rewritten
	if err := r.SyncPaused(ctx, "h1", paused("h1")); err != nil {
		t.Fatal(err)
	}
	if got := paused("h1"); len(got) != 0 {
		t.Fatalf("a worker no longer a member is still paused: %v", got)
	}
}

// BusyDelivered gives the id from which a blocking read of the input
// returns exactly when a task is waiting, and WaitInputs returns then.
func TestWaitInputsReturnsWhenATaskArrives(t *testing.T) {
	r, ctx := newRDB(t)
	input := r.Keys.Input("w")
	r.c.SAdd(ctx, r.Keys.Workers(), "w")
	r.EnsureGroup(ctx, input, protocol.WorkerGroup)
	r.c.XAdd(ctx, &redis.XAddArgs{Stream: input, Values: map[string]any{"data": "{}"}})
	msgs, _ := r.ReadNew(ctx, input, protocol.WorkerGroup, "w", 1, -1)
	r.Ack(ctx, input, protocol.WorkerGroup, msgs[0].ID)
	b, after, err := r.BusyDelivered(ctx, "w", input, protocol.WorkerGroup)
	if err != nil || b != NotBusy || after != msgs[0].ID {
		t.Fatalf("busy %q after %q err %v, want not busy after %s", b, after, err, msgs[0].ID)
	}
	got, err := r.WaitInputs(ctx, []string{input}, []string{after}, 20*time.Millisecond)
	if err != nil || len(got) != 0 {
		t.Fatalf("nothing waiting, but the read returned %v %v", got, err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		r.c.XAdd(context.Background(), &redis.XAddArgs{Stream: input, Values: map[string]any{"data": "{}"}})
	}()
	start := time.Now()
	got, err = r.WaitInputs(ctx, []string{input}, []string{after}, 5*time.Second)
	if err != nil || len(got) != 1 || got[0] != input || time.Since(start) > 2*time.Second {
		t.Fatalf("read %v %v after %s", got, err, time.Since(start))
	}
	if b, _, _ := r.BusyDelivered(ctx, "w", input, protocol.WorkerGroup); b != BusyWaiting {
		t.Fatalf("busy %q with a task waiting", b)
	}
}

// A reply and the acknowledgement of its command are one transaction.
func TestReplyAcknowledgesTheCommand(t *testing.T) {
	r, ctx := newRDB(t)
	stream := r.Keys.Commands()
	r.EnsureGroup(ctx, stream, protocol.ManagerGroup)
	r.c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"data": "{}"}})
	msgs, _ := r.ReadNew(ctx, stream, protocol.ManagerGroup, "m", 1, -1)
	if err := r.Reply(ctx, r.Keys.Replies("c"), []byte(`{"ok":true}`), stream, protocol.ManagerGroup, msgs[0].ID); err != nil {
		t.Fatal(err)
	}
	if n := r.c.XLen(ctx, r.Keys.Replies("c")).Val(); n != 1 {
		t.Fatalf("%d replies", n)
	}
	if p := r.c.XPending(ctx, stream, protocol.ManagerGroup).Val(); p.Count != 0 {
		t.Fatalf("%d entries still pending after the reply", p.Count)
	}
	if ttl := r.c.TTL(ctx, r.Keys.Replies("c")).Val(); ttl <= 0 {
		t.Fatalf("reply stream TTL %v", ttl)
	}
}

// StatusFields reads the asked fields and heartbeats of many workers, a
// missing field or heartbeat as empty.
func TestStatusFieldsReadsManyWorkersAtOnce(t *testing.T) {
	r, ctx := newRDB(t)
	r.c.HSet(ctx, r.Keys.Status("a"), protocol.StatusFieldContainer, "running", protocol.StatusFieldSpec, "{}")
	r.c.Set(ctx, r.Keys.Heartbeat("a"), "beat", time.Minute)
	sts, beats, err := r.StatusFields(ctx, []string{"a", "b"}, []string{protocol.StatusFieldContainer, protocol.StatusFieldState}, true)
	if err != nil {
		t.Fatal(err)
	}
	if sts[0][protocol.StatusFieldContainer] != "running" || sts[0][protocol.StatusFieldState] != "" || len(sts[0]) != 1 || len(sts[1]) != 0 {
		t.Fatalf("fields %v", sts)
	}
	if string(beats[0]) != "beat" || beats[1] != nil {
		t.Fatalf("heartbeats %q", beats)
	}
}
