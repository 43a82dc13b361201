package spawner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// The escape suite, on the manager's default settings (sealed workers,
// this host's gateway in front of Redis and the model API): the real
// claude in a worker made by the spawner, with ALLOWED_COMMANDS=* (the
// worst case: the agent may run any command), driven by the stub model,
// tries every way to the secrets, to the host's services and to other
// workers. Redis has a password (the manager's) and an ACL user per
// worker; the model API key is a planted secret. Every attempt fails, and
// neither secret appears in what the agent saw, in any Redis entry, in the
// container's log or in its image.
func TestEscapeSuite(t *testing.T) { escapeSuite(t, "", nil) }

// The same suite with both workers in gVisor (runsc): every attempt fails
// as it does under runc, and the agent's kernel is gVisor's, not the
// host's.
func TestEscapeSuiteGVisor(t *testing.T) { escapeSuite(t, protocol.RuntimeGVisor, nil) }

// The same suite in a DOCKER worker, whose container gives up Docker's
// default seccomp profile, its masked /proc paths and AppArmor for an
// engine of its own, plus the ways those open: root in a user namespace
// of the agent's reading the wrapper's secrets, a proc of its own
// mounted there, a write to a kernel setting /proc no longer shields.
func TestEscapeSuiteDocker(t *testing.T) {
	escapeSuite(t, "", []protocol.Capability{protocol.CapDocker})
}

func escapeSuite(t *testing.T, runtime protocol.Runtime, caps []protocol.Capability) {
	docker := slices.Contains(caps, protocol.CapDocker)
	testkit.WorkerImages(t)
	const redisPass = "manager-pass-0b6f2c"
	const apiKey = "sk-ant-planted-9d41e7c2a5"
	r := testkit.StartRedisWith(t, testkit.RedisOptions{Password: redisPass})
	rc := r.Client(t)
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	dc.NegotiateAPIVersion(context.Background())
	t.Cleanup(func() { dc.Close() })
	stub, err := stubmodel.Start(stubmodel.Script{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	stub.SetAPIKey(apiKey)
	t.Setenv("ANTHROPIC_BASE_URL", stub.URL)
	t.Setenv("ANTHROPIC_API_KEY", apiKey)
	prefix := fmt.Sprintf("esc%d", time.Now().UnixNano())
	gwDir := gatewaytest.Dir(t)
	cfg, err := ConfigFromEnv(func(k string) string {
		return map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": prefix, "WORKER_STOP_TIMEOUT": "12s", "WORKER_REDIS_ACL": "on", "GATEWAY_DIR": gwDir,
			"WORKER_BASE_IMAGE": os.Getenv("WORKER_BASE_IMAGE")}[k] // a checkout's own wrapper, as newFixture
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DiskDir = testkit.TempDiskDir(t)
	if cfg.NetworkMode != NetworkSealed {
		t.Fatalf("the default network mode is %q, want sealed", cfg.NetworkMode)
	}
	gw := gatewaytest.Start(t, gateway.Config{Dir: gwDir, Redis: r.Addr, Model: stub.URL})
	// A service of the host on loopback, standing for the dashboard and
	// /metrics (which also want the operator token).
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ops-page-reached") }))
	t.Cleanup(ops.Close)
	s := NewDocker(cfg, dc, rc, &images.Builder{Docker: dc, Redis: rc, Keys: cfg.Keys, BaseImage: cfg.BaseImage}, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	testkit.CleanupLabelled(t, testkit.KeyPrefixLabel(prefix))
	ctx := context.Background()
	victim, err := s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Runtime: runtime})
	if err != nil {
		t.Fatal(err)
	}
	// Two names on its allowlist: one that does not resolve, one that
	// resolves to the host's loopback (the gateway does not dial it).
	// Its disk is 64m: the agent fills it.
	agent, err := s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, AllowedCommands: []string{"*"}, Runtime: runtime, Capabilities: caps, Limits: protocol.Limits{Disk: "64m"},
		Network: &protocol.Network{Allow: []string{"nx.invalid:443", "localhost:" + r.Addr[strings.LastIndex(r.Addr, ":")+1:]}}})
	if err != nil {
		t.Fatal(err)
	}
	port := r.Addr[strings.LastIndex(r.Addr, ":")+1:]
	opsPort := ops.URL[strings.LastIndex(ops.URL, ":")+1:]
	// resp sends one RESP command to the worker's redis.sock (the gateway's
	// relay to Redis, which the agent can call as well as the wrapper) and
	// prints the answer, with the perl every Debian has.
	resp := func(args ...string) string {
		cmd := fmt.Sprintf("*%d\\r\\n", len(args))
		for _, a := range args {
			cmd += fmt.Sprintf("$%d\\r\\n%s\\r\\n", len(a), a)
		}
		return fmt.Sprintf(`printf '%s' | perl -MIO::Socket::UNIX -e '$s=IO::Socket::UNIX->new(Peer=>"/run/agentvisor/redis.sock") or die "no socket: $!"; local $/; print $s <STDIN>; sysread($s,$b,4096); print $b'; echo`, cmd)
	}
	// model calls the model API through the worker's model.sock (the
	// gateway's, which the agent can connect to as well as the wrapper)
	// with a key of the agent's own and the extra header given, and prints
	// the answer's status line marked MODELSOCK-name.
	model := func(name, header string) string {
		return `perl -MIO::Socket::UNIX -e '$s=IO::Socket::UNIX->new(Peer=>"/run/agentvisor/model.sock") or die "no socket: $!"; ` +
			`$b=q({"model":"claude-stub","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}); ` +
			`print $s "POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: sk-ant-agents-own-key\r\n` + header +
			`anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: ".length($b)."\r\nConnection: close\r\n\r\n$b"; ` +
			`$a=<$s>; print "MODELSOCK-` + name + ` $a"'`
	}
	// tcp tries a TCP connect and says which way it went, marked with
	// name so that the assertions below find each probe's answer.
	tcp := func(name, host, port string) string {
		return fmt.Sprintf(`(exec 3<>/dev/tcp/%s/%s) 2>/dev/null && echo "%s-CONNECTED" || echo "%s-FAILED"`, host, port, name, name)
	}
	victimInput := cfg.Keys.Input(victim.WorkerID)
	attempts := []string{
		`cat /proc/1/environ | tr '\0' '\n'; echo; cat /proc/1/cmdline | tr '\0' ' '`,
		`env; cat ~/.claude.json ~/.claude/settings.json ~/.factory/settings.json 2>&1 | head -50`,
		`for p in /proc/[0-9]*; do echo "$p: $(tr '\0' ' ' < $p/cmdline 2>&1) $(tr '\0' ' ' < $p/environ 2>&1)"; done`,
		`grep -rIl "sk-ant\|requirepass\|manager-pass" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head; ls -la /proc/1/fd /proc/1/map_files 2>&1 | head`,
		`cat /proc/1/mem 2>&1 | head -c 100; cat /proc/1/maps 2>&1 | head -3`,
		// The kernel the agent's calls reach.
		`echo KERNEL-BEGIN; cat /proc/version; echo KERNEL-END`,
		// The host's loopback services: its Redis, its ops page.
		tcp("HOSTREDIS", "127.0.0.1", port),
		tcp("HOSTOPS", "127.0.0.1", opsPort),
		// The host's listening ports, as /proc/net/tcp lists them.
		`echo NETTCP-BEGIN; cat /proc/net/tcp /proc/net/tcp6 2>&1; echo NETTCP-END`,
		// Out of the container: an address, a name.
		tcp("OUTSIDE", "10.255.255.1", "80"),
		`getent hosts example.com && echo DNS-RESOLVED || echo DNS-FAILED`,
		// Redis through the worker's own socket: it wants a password.
		resp("PING"),
		resp("XADD", victimInput, "*", "data", `{"v":1,"type":"task","request_id":"forged","prompt":"x"}`),
		resp("HGETALL", cfg.Keys.Status(victim.WorkerID)),
		resp("KEYS", "*"),
		// The model API through the worker's own socket: it wants the
		// worker's token, which only the wrapper holds.
		model("OWNKEY", ""),
		model("GUESSED", gateway.ModelTokenHeader+": agentvisor-worker-guessed\\r\\n"),
		// egress.sock itself, past the wrapper's loopback proxy: a host
		// off the allowlist, and the gateway's refusal log (the
		// wrapper's, with the worker's token).
		`perl -MIO::Socket::UNIX -e '$s=IO::Socket::UNIX->new(Peer=>"/run/agentvisor/egress.sock") or die "no socket: $!"; ` +
			`print $s "CONNECT direct.example:443 HTTP/1.1\r\nHost: direct.example:443\r\n\r\n"; $a=<$s>; print "EGRESSSOCK-DIRECT $a"'`,
		// What the gateway's errors tell of the host: a name that does
		// not resolve (its resolver's address?), a name of the host's
		// loopback (its addresses?). The whole answers are printed.
		`perl -MIO::Socket::UNIX -e '$s=IO::Socket::UNIX->new(Peer=>"/run/agentvisor/egress.sock") or die "no socket: $!"; ` +
			`print $s "CONNECT nx.invalid:443 HTTP/1.1\r\nHost: nx.invalid:443\r\nConnection: close\r\n\r\n"; alarm 10; local $/; $a=<$s>; print "EGRESSNX-BEGIN $a EGRESSNX-END"'`,
		`perl -MIO::Socket::UNIX -e '$s=IO::Socket::UNIX->new(Peer=>"/run/agentvisor/egress.sock") or die "no socket: $!"; ` +
			`print $s "CONNECT localhost:` + port + ` HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"; alarm 10; local $/; $a=<$s>; print "EGRESSLO-BEGIN $a EGRESSLO-END"'`,
		`perl -MIO::Socket::UNIX -e '$s=IO::Socket::UNIX->new(Peer=>"/run/agentvisor/egress.sock") or die "no socket: $!"; ` +
			`print $s "GET ` + gateway.RefusalsPath + ` HTTP/1.1\r\nHost: gateway\r\n\r\n"; $a=<$s>; print "EGRESSSOCK-LOG $a"'`,
	}
	// A user namespace of its own: only a DOCKER worker may make one (the
	// wrapper's sweep spares what runs in one).
	attempts = append(attempts, `unshare -r true 2>/dev/null && echo MKUSERNS-MADE || echo MKUSERNS-REFUSED`)
	if docker {
		attempts = append(attempts,
			// Root in a user namespace of its own, at PID 1's secrets.
			`unshare -r sh -c 'id -u; cat /proc/1/environ; cat /proc/1/mem | head -c 100' 2>&1 | tr '\0' '\n'; echo USERNS-DONE`,
			// A proc of its own, mounted in that namespace.
			`unshare -rm sh -c 'mount -t proc proc /mnt && echo PROCMOUNT-MOUNTED; cat /mnt/1/environ /mnt/1/cmdline; ls /mnt/1/fd' 2>&1 | tr '\0' '\n'; echo PROCMOUNT-DONE`,
			// A kernel setting, unshielded in /proc (harmless if it went).
			`(echo 1 > /proc/sys/vm/drop_caches) 2>/dev/null && echo DROPCACHES-WROTE || echo DROPCACHES-REFUSED`,
			// The host's engine, at its usual sockets.
			`ls -l /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock 2>&1; docker ps -a --format 'INNERPS {{.Names}}' 2>&1 | grep -v level=; echo ENGINE-DONE`,
		)
	}
	// proxy calls the wrapper's model API proxy from the agent's shell,
	// with the agent's own key (the proxy's token: what any program in
	// the container can read from the agent's environment), and prints
	// the answer's status line marked PROXY-name.
	proxy := func(name, method, path string) string {
		return `perl -MIO::Socket::INET -e '($h)=$ENV{ANTHROPIC_BASE_URL}=~m{//([^/]+)}; $s=IO::Socket::INET->new(PeerAddr=>$h) or die "no proxy: $!"; ` +
			`$b=q({"model":"claude-stub","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}); ` +
			`print $s "` + method + ` ` + path + ` HTTP/1.1\r\nHost: $h\r\nx-api-key: $ENV{ANTHROPIC_API_KEY}\r\nanthropic-version: 2023-06-01\r\n` +
			`content-type: application/json\r\ncontent-length: ".length($b)."\r\nConnection: close\r\n\r\n$b"; $a=<$s>; print "PROXY-` + name + ` $a"'`
	}
	var steps []stubmodel.Step
	for _, a := range attempts {
		steps = append(steps, stubmodel.Step{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": a, "description": "probe"}}})
	}
	// A model call of the agent's own, past the agent CLI (which does not
	// count it): the stub answers it with the next step, a large one.
	// Then a path of the vendor's API that is no model call.
	const extraInput = 600000
	steps = append(steps,
		stubmodel.Step{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": proxy("EXTRA", "POST", "/v1/messages"), "description": "probe"}}},
		stubmodel.Step{Text: "an answer nobody counted", Usage: &stubmodel.Usage{InputTokens: extraInput, OutputTokens: 10}},
		stubmodel.Step{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": proxy("PATH", "GET", "/v1/organizations/api_keys"), "description": "probe"}}},
	)
	// Last, the disk: 200 MiB written to the workspace against a 64 MiB
	// limit, and a write to the root filesystem. Then 512 KiB given back
	// before anything is printed (the agent's shell tool keeps its output
	// in a file, on the same disk) and for the agent's last writes of its
	// session: the disk stays full.
	steps = append(steps, stubmodel.Step{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": `e=$(head -c 200M /dev/zero 2>&1 >/workspace/fill); rc=$?; ` +
		`n=$(wc -c </workspace/fill); truncate -s -512K /workspace/fill; w=$(find / -xdev -writable ! -type l 2>/dev/null | grep -vxE '/(tmp|var/tmp|run/lock|workspace|home/worker)' | head -5 | tr '\n' ' '); ` +
		`echo "DISKFILL-rc=$rc $e"; echo "DISKFILL-bytes=$n"; echo "DISKROOT-writable:[$w]"`, "description": "probe"}}})
	steps = append(steps, stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {\"ok\": true}}"})
	stub.SetScript(stubmodel.Script{Steps: steps})
	doc, _ := protocol.Task{RequestID: "escape-1", Prompt: "look around"}.Encode()
	rc.XAdd(ctx, &redis.XAddArgs{Stream: cfg.Keys.Input(agent.WorkerID), Values: protocol.Values(doc)})
	testkit.Eventually(t, "the agent's task answered", 2*time.Minute, func() bool {
		st, _ := rc.HGet(ctx, cfg.Keys.Run("escape-1"), protocol.RunFieldStatus).Result()
		return st == string(protocol.RunCompleted) || st == string(protocol.RunFailed)
	})

	// What the agent saw: every tool result went back to the model.
	var seen strings.Builder
	for _, req := range stub.Requests() {
		seen.WriteString(req.Text())
		if !req.KeyOK {
			t.Errorf("a model request without the real key: the proxy did not put it in")
		}
	}
	saw := seen.String()
	// Under gVisor the agent's kernel is gVisor's (its Linux version is
	// not the host's), and the engine ran both workers in runsc.
	if i, j := strings.Index(saw, "KERNEL-BEGIN"), strings.LastIndex(saw, "KERNEL-END"); i < 0 || j < i {
		t.Errorf("the agent's kernel probe gave no answer")
	} else if host, err := exec.Command("uname", "-r").Output(); err != nil {
		t.Fatal(err)
	} else if onHost := strings.Contains(saw[i:j], strings.TrimSpace(string(host))); onHost != (runtime != protocol.RuntimeGVisor) {
		t.Errorf("runtime %q: the agent's kernel is the host's (%s): %v; it saw:\n%s", runtime, strings.TrimSpace(string(host)), onHost, saw[i:j])
	}
	for _, w := range []string{victim.WorkerID, agent.WorkerID} {
		c, err := dc.ContainerInspect(ctx, ContainerName(w))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[protocol.Runtime]string{protocol.RuntimeGVisor: "runsc"}[runtime]; c.HostConfig.Runtime != want && (want != "" || c.HostConfig.Runtime != "runc") {
			t.Errorf("worker %s runs in %q, want %q", w, c.HostConfig.Runtime, want)
		}
	}
	if !strings.Contains(saw, "NOAUTH") && !strings.Contains(saw, "WRONGPASS") && !strings.Contains(saw, "NOPERM") {
		t.Errorf("the agent's Redis attempts through its socket were not refused as expected; it saw:\n%s", tail(saw, 3000))
	}
	// The agent's own model calls through model.sock were refused by the
	// gateway and never reached the model (every request the model saw
	// carried the real key, checked above).
	for _, probe := range []string{"OWNKEY", "GUESSED"} {
		if !strings.Contains(saw, "MODELSOCK-"+probe+" HTTP/1.1 403") {
			t.Errorf("the agent's model call through model.sock (%s) was not refused 403; it saw:\n%s", probe, tail(saw, 3000))
		}
	}
	// The agent's own model call was forwarded and counted in the task's
	// usage; the path that is no model call was refused and never
	// reached the model's host.
	if !strings.Contains(saw, "PROXY-EXTRA HTTP/1.1 200") || !strings.Contains(saw, "PROXY-PATH HTTP/1.1 404") {
		t.Errorf("the agent's calls of the model proxy: want EXTRA 200 and PATH 404; it saw:\n%s", tail(saw, 3000))
	}
	if other := stub.OtherRequests(); len(other) != 0 {
		t.Errorf("requests other than model calls reached the model's host: %v", other)
	}
	var out *protocol.Output
	outs, _ := rc.XRange(ctx, cfg.Keys.Output(agent.WorkerID), "-", "+").Result()
	for _, m := range outs {
		data, _ := protocol.EntryData(m.Values)
		if o, err := protocol.DecodeOutput(data); err == nil && o.RequestID == "escape-1" {
			out = &o
		}
	}
	if out == nil || out.Usage.Input < extraInput {
		t.Errorf("the task's output does not count the agent's own model call of %d input tokens: %+v", extraInput, out)
	} else {
		t.Logf("the task's usage: %+v, cost %.4f (estimated %v)", out.Usage, out.CostUSD, out.CostEstimated)
	}
	// The gateway's answers say what failed, not what the host has.
	for _, probe := range []struct{ name, want string }{
		{"EGRESSNX", "does not resolve"},
		{"EGRESSLO", "resolves to local addresses only"},
	} {
		i, j := strings.Index(saw, probe.name+"-BEGIN"), strings.Index(saw, probe.name+"-END")
		if i < 0 || j < i {
			t.Errorf("probe %s gave no answer", probe.name)
			continue
		}
		answer := saw[i:j]
		if k := strings.Index(answer, "agentvisor gateway:"); k >= 0 {
			answer = answer[k:] // the body (the Date header has colons of its own)
		}
		if !strings.Contains(answer, probe.want) || strings.Contains(answer, "127.0.0.") || strings.Contains(answer, ":53") || strings.Contains(answer, "lookup") {
			t.Errorf("the gateway's answer to %s: want %q and nothing of the host's addresses or resolver:\n%s", probe.name, probe.want, answer)
		}
	}
	for _, probe := range []string{"DIRECT", "LOG"} {
		if !strings.Contains(saw, "EGRESSSOCK-"+probe+" HTTP/1.1 403") {
			t.Errorf("the agent's call straight to egress.sock (%s) was not refused 403; it saw:\n%s", probe, tail(saw, 3000))
		}
	}
	// The disk: the write past its limit refused ENOSPC (gVisor's as
	// runc's: the disk is the host kernel's filesystem either way).
	if !strings.Contains(saw, "No space left on device") || !strings.Contains(saw, "DISKFILL-rc=1") {
		t.Errorf("the agent's write of 200 MiB against its 64 MiB disk was not refused ENOSPC; it saw:\n%s", tail(saw, 3000))
	}
	if m := regexp.MustCompile(`DISKFILL-bytes=([0-9]+)`).FindStringSubmatch(saw); m == nil {
		t.Errorf("the agent's fill did not say what it wrote; it saw:\n%s", tail(saw, 600))
	} else if n, _ := strconv.ParseInt(m[1], 10, 64); n > 64<<20 {
		t.Errorf("the agent wrote %d bytes on a 64 MiB disk", n)
	}
	// Nothing of the root filesystem is writable (read-only) but the
	// mount points of the disk's directories: all the worker may write is
	// on its disk.
	if !strings.Contains(saw, "DISKROOT-writable:[]") {
		t.Errorf("the root filesystem has paths the agent may write; it saw:\n%s", tail(saw, 600))
	}
	// Every refusal the gateway made, on whichever socket, reached the
	// task's consumer as a warning with its code.
	refused := map[string]int{}
	msgs, _ := rc.XRange(ctx, cfg.Keys.Output(agent.WorkerID), "-", "+").Result()
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if p, err := protocol.DecodeProgress(data); err == nil && p.RequestID == "escape-1" && p.Refused != nil && p.Refused.Code != "" {
			refused[p.Refused.Tool+" "+p.Refused.Code+" "+p.Refused.Host]++
		}
	}
	for _, want := range []string{
		protocol.RefusedToolDisk + " " + protocol.RefusedDiskFull + " ",    // the disk it filled
		protocol.RefusedToolModel + " " + protocol.RefusedModelToken + " ", // OWNKEY and GUESSED
		protocol.RefusedToolNetwork + " " + protocol.RefusedEgress + " direct.example",
		protocol.RefusedToolNetwork + " " + protocol.RefusedModelToken + " ", // the refusal log without the token
		protocol.RefusedToolModel + " " + protocol.RefusedModelPath + " ",    // the proxy's refusal of a path
	} {
		if refused[want] == 0 {
			t.Errorf("no warning for the gateway's refusal %q on escape-1; the warnings: %v", want, refused)
		}
	}
	if n := refused[protocol.RefusedToolModel+" "+protocol.RefusedModelToken+" "]; n != 2 {
		t.Errorf("%d warnings for the 2 model calls refused by model.sock", n)
	}
	if st := gw.Stats()[agent.WorkerID]; st.ModelRefused != 2 || st.ModelRequests == 0 {
		t.Errorf("the gateway's model stats for the agent's worker: %+v, want 2 refused and the wrapper's calls forwarded", st)
	}
	for _, probe := range []string{"HOSTREDIS", "HOSTOPS", "OUTSIDE"} {
		if strings.Contains(saw, probe+"-CONNECTED") || !strings.Contains(saw, probe+"-FAILED") {
			t.Errorf("probe %s: want a failed connect; the agent saw:\n%s", probe, tail(saw, 3000))
		}
	}
	if strings.Contains(saw, "DNS-RESOLVED") || !strings.Contains(saw, "DNS-FAILED") || strings.Contains(saw, "ops-page-reached") {
		t.Errorf("a name resolved or the host's page answered; the agent saw:\n%s", tail(saw, 3000))
	}
	// Its /proc/net/tcp is its container's: the host's Redis port, which
	// listens on the host's loopback, is not there.
	if i, j := strings.Index(saw, "NETTCP-BEGIN"), strings.LastIndex(saw, "NETTCP-END"); i < 0 || j < i {
		t.Errorf("the agent's /proc/net/tcp probe gave no answer")
	} else if p, _ := strconv.Atoi(port); strings.Contains(saw[i:j], fmt.Sprintf(":%04X ", p)) {
		t.Errorf("the host's Redis port %s shows in the agent's /proc/net/tcp:\n%s", port, saw[i:j])
	}
	for _, secret := range []string{redisPass, apiKey, s.rdb.WorkerUser(agent.WorkerID) + ":"} {
		if strings.Contains(saw, secret) {
			t.Errorf("the agent found %q; it saw:\n%s", secret, tail(saw, 3000))
		}
	}
	// The victim's input got no forged task.
	if n := rc.XLen(ctx, victimInput).Val(); n != 0 {
		t.Errorf("the victim's input holds %d entries", n)
	}
	// No secret in any Redis entry (streams, hashes, strings).
	keys, _ := rc.Keys(ctx, prefix+":*").Result()
	for _, k := range keys {
		var dump string
		switch rc.Type(ctx, k).Val() {
		case "stream":
			msgs, _ := rc.XRange(ctx, k, "-", "+").Result()
			dump = fmt.Sprint(msgs)
		case "hash":
			dump = fmt.Sprint(rc.HGetAll(ctx, k).Val())
		case "string":
			dump = rc.Get(ctx, k).Val()
		}
		for _, secret := range []string{redisPass, apiKey} {
			if strings.Contains(dump, secret) {
				t.Errorf("Redis key %s holds a secret", k)
			}
		}
	}
	// A user namespace: refused by the container's seccomp profile, made
	// where the worker runs an engine of its own (DOCKER) and in gVisor,
	// whose kernel of its own implements it inside the sandbox (the host's
	// kernel never sees it).
	if want := map[bool]string{false: "MKUSERNS-REFUSED", true: "MKUSERNS-MADE"}[docker || runtime == protocol.RuntimeGVisor]; !strings.Contains(saw, want) {
		t.Errorf("making a user namespace: want %s; the agent saw:\n%s", want, tail(saw, 3000))
	}
	if docker {
		for _, probe := range []string{"USERNS-DONE", "PROCMOUNT-DONE", "ENGINE-DONE"} {
			if !strings.Contains(saw, probe) {
				t.Errorf("probe %s gave no answer; the agent saw:\n%s", probe, tail(saw, 3000))
			}
		}
		for _, probe := range []string{"USERNS-DONE", "PROCMOUNT-DONE", "DROPCACHES-REFUSED", "ENGINE-DONE"} {
			if i := strings.LastIndex(saw, probe); i >= 0 {
				t.Logf("the probe ending %s saw:\n%s", probe, saw[max(0, i-400):i])
			}
		}
		if !strings.Contains(saw, "DROPCACHES-REFUSED") || strings.Contains(saw, "DROPCACHES-WROTE") {
			t.Errorf("the agent wrote a kernel setting; it saw:\n%s", tail(saw, 3000))
		}
		if strings.Contains(saw, "INNERPS "+ContainerName("")) || strings.Contains(saw, "srw") {
			t.Errorf("the agent reached the host's engine; it saw:\n%s", tail(saw, 3000))
		}
	}
	// No secret in the container's log.
	logs, _ := exec.Command("docker", "logs", ContainerName(agent.WorkerID)).CombinedOutput()
	for _, secret := range []string{redisPass, apiKey} {
		if strings.Contains(string(logs), secret) {
			t.Errorf("the worker's log holds a secret")
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
