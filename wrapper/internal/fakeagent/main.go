// Command fakeagent is a scripted stand-in for the claude and droid CLIs,
// built by the tests. It accepts their command lines (`claude -p PROMPT
// ...`, `droid exec ... PROMPT`), prints their stream-json formats, and
// misbehaves on request: the prompt holds words "fake:<mode>" that choose
// what it does, so that one binary serves every case of a test table.
//
// Modes: complete (default), blocked, failed, no-stop, crash-after-init,
// crash-before-init, no-result, exit1-after-success, is-error,
// hang-after-result, child-holds-stdout, big-line, garbage, orphans,
// ignore-sigterm, api-retry, progress, sleep-<ms>, schema, resume-missing,
// leak-secret, stamp (start and exit times in the result), edit (writes
// edit-<pid>.txt in its working directory), commit (edit, and commits it
// with git), push-other (git push to a branch not its task's), git-config
// (the git configuration it was given in its environment, GIT_CONFIG_*,
// as the result), progress-burst,
// hog (allocates memory until the OOM killer ends it), hang-after-turn (one
// assistant message with its usage, then nothing), snoop (tries to read the
// wrapper's secrets from /proc and the home directory as an attacker
// would, and writes what it got to snoop.txt in its working directory),
// slow-interrupt (one assistant message, then waits; SIGINT makes it take
// 500 ms to save its turn, write the time it is done to wound-down.txt in
// its working directory, print an error result with usage and cost, and
// exit, as an interrupted Claude under a CPU limit does), fill (writes
// to its working directory, $HOME, /tmp and /var/tmp until each write
// fails, and tries the root filesystem: the bytes each took and the
// errors are the result).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startNS is when the process started, for the latency benchmarks.
var startNS = time.Now().UnixNano()

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "sleep-ms": // helper: a process that sleeps and exits
			ms, _ := strconv.Atoi(os.Args[2])
			time.Sleep(time.Duration(ms) * time.Millisecond)
			return
		case "spawn-orphans": // helper: start N sleepers and exit at once
			n, _ := strconv.Atoi(os.Args[2])
			for i := 0; i < n; i++ {
				c := exec.Command(os.Args[0], "sleep-ms", "300")
				if i%2 == 0 { // half escape the agent's process group
					c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
				}
				_ = c.Start()
			}
			return
		}
	}
	droid, prompt, resume := parseArgs(os.Args[1:])
	a := &agent{droid: droid, session: "sess-" + strconv.Itoa(os.Getpid())}
	if resume != "" {
		a.session = resume
	}
	modes := map[string]bool{}
	sleepMS := 0
	// FAKE_AGENT_MODES (words "fake:<mode>" too) holds for every run: a
	// persistent worker's process reads no prompt from its command line.
	for _, w := range strings.Fields(prompt + " " + os.Getenv("FAKE_AGENT_MODES")) {
		if m, ok := strings.CutPrefix(w, "fake:"); ok {
			modes[m] = true
			if ms, ok := strings.CutPrefix(m, "sleep-"); ok {
				sleepMS, _ = strconv.Atoi(ms)
			}
		}
	}
	a.run(modes, sleepMS, prompt, resume)
}

// parseArgs finds the prompt in a claude or droid command line.
func parseArgs(args []string) (droid bool, prompt, resume string) {
	if len(args) > 0 && args[0] == "exec" {
		droid = true
		args = args[1:]
	}
	takesValue := map[string]bool{"-p": false, "--output-format": true, "-o": true, "--resume": true, "-s": true,
		"--session-id": true, "--append-system-prompt": true, "--json-schema": true, "-m": true, "--model": true,
		"--auto": true, "--permission-mode": true, "--input-format": true, "--cwd": true, "--settings": true}
	fromStdin, streamInput := false, false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-p" && !droid:
			// claude -p PROMPT, or -p with the prompt on stdin
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				prompt = args[i+1]
				i++
			} else {
				fromStdin = true
			}
		case a == "-f" && droid && i+1 < len(args): // droid exec -f FILE (the wrapper: /dev/stdin)
			b, _ := os.ReadFile(args[i+1])
			prompt = string(b)
			i++
		case a == "--input-format": // persistent: stdin carries messages, not one prompt
			streamInput = true
			i++
		case a == "--resume" || a == "-s" || a == "--session-id":
			if i+1 < len(args) {
				resume = args[i+1]
			}
			i++
		case takesValue[a]:
			i++
		case strings.HasPrefix(a, "-"):
		default:
			prompt = a
		}
	}
	if fromStdin && !streamInput && prompt == "" {
		b, _ := io.ReadAll(os.Stdin)
		prompt = string(b)
	}
	return droid, prompt, resume
}

type agent struct {
	droid   bool
	session string
}

func (a *agent) emit(v map[string]any) {
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

var usage = map[string]any{"input_tokens": 2000, "output_tokens": 80, "cache_read_input_tokens": 9000, "cache_creation_input_tokens": 100}

func (a *agent) init() {
	if a.droid {
		a.emit(map[string]any{"type": "system", "subtype": "init", "session_id": a.session, "model": "custom:Fake-0", "tools": []string{"Execute"}})
		return
	}
	a.emit(map[string]any{"type": "system", "subtype": "init", "session_id": a.session, "model": "claude-fake", "tools": []string{"Bash"}})
}

func (a *agent) assistant(text string, turn int) {
	if a.droid {
		a.emit(map[string]any{"type": "message", "role": "assistant", "text": text, "session_id": a.session})
		return
	}
	u := map[string]any{"input_tokens": 2000 + turn, "output_tokens": 80, "cache_read_input_tokens": 9000, "cache_creation_input_tokens": 100}
	a.emit(map[string]any{"type": "assistant", "session_id": a.session, "message": map[string]any{
		"id": fmt.Sprintf("msg_%d", turn), "role": "assistant", "content": []any{map[string]any{"type": "text", "text": text}}, "usage": u}})
}

func (a *agent) result(text string, isError bool, extra map[string]any) {
	if a.droid {
		if isError {
			a.emit(map[string]any{"type": "error", "source": "agent_loop", "message": "500 " + text, "session_id": a.session})
			return
		}
		a.emit(map[string]any{"type": "completion", "finalText": text, "numTurns": 2, "durationMs": 12, "session_id": a.session,
			"usage": map[string]any{"input_tokens": 4000, "output_tokens": 160, "cache_read_input_tokens": 18000, "cache_creation_input_tokens": 200}})
		return
	}
	subtype := "success"
	if isError {
		subtype = "error_during_execution"
	}
	v := map[string]any{"type": "result", "subtype": subtype, "is_error": isError, "result": text, "session_id": a.session,
		"num_turns": 2, "duration_ms": 12, "total_cost_usd": 0.03425,
		"usage":      map[string]any{"input_tokens": 4000, "output_tokens": 160, "cache_read_input_tokens": 18000, "cache_creation_input_tokens": 200},
		"modelUsage": map[string]any{"claude-fake": map[string]any{"contextWindow": 200000}}}
	for k, x := range extra {
		v[k] = x
	}
	a.emit(v)
}

// run plays the agent's part: it starts, misbehaves as asked, works, and
// ends with its result.
func (a *agent) run(modes map[string]bool, sleepMS int, prompt, resume string) {
	a.begin(modes, resume)
	a.misbehave(modes)
	a.hang(modes, sleepMS)
	a.assistant("working", 1)
	stop := stopJSON(modes)
	if modes["progress-burst"] {
		progressBurst()
	}
	if modes["git-config"] {
		cfg := map[string]string{}
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "GIT_CONFIG_") {
				cfg[k] = v
			}
		}
		b, _ := json.Marshal(cfg)
		stop = `{"status": "complete", "result": ` + string(b) + `}`
	}
	if modes["edit"] || modes["commit"] {
		// A coding agent's work: a file changed in its working directory
		// (a task's git worktree), and, with commit, committed by the
		// agent itself.
		name := "edit-" + strconv.Itoa(os.Getpid()) + ".txt"
		if err := os.WriteFile(name, []byte(prompt+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "edit:", err)
			os.Exit(1)
		}
		if modes["commit"] {
			for _, args := range [][]string{{"add", name}, {"-c", "user.name=fake agent", "-c", "user.email=fake@agent.test", "commit", "-q", "-m", "the agent's commit"}} {
				if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
					fmt.Fprintln(os.Stderr, "commit:", err, string(out))
					os.Exit(1)
				}
			}
		}
	}
	if modes["push-other"] {
		// An agent that tries to push where its task does not point; it
		// goes on whatever git says.
		out, err := exec.Command("git", "push", "origin", "HEAD:refs/heads/not-my-branch").CombinedOutput()
		fmt.Fprintln(os.Stderr, "push-other:", err, string(out))
	}
	if modes["fill"] {
		b, _ := json.Marshal(fill())
		stop = `{"status": "complete", "result": ` + string(b) + `}`
	}
	if modes["stamp"] {
		// The benchmarks read when the agent started and when it exited.
		stop = fmt.Sprintf(`{"status": "complete", "result": {"start_ns": %d, "exit_ns": %d}}`, startNS, time.Now().UnixNano())
	}
	a.finish(modes, stop)
}

// begin prints the init line, or fails before or right after it.
func (a *agent) begin(modes map[string]bool, resume string) {
	if modes["resume-missing"] && resume != "" {
		fmt.Fprintf(os.Stderr, "No conversation found with session ID: %s\n", resume)
		os.Exit(1)
	}
	if modes["crash-before-init"] {
		fmt.Fprintln(os.Stderr, "fatal: could not load configuration")
		os.Exit(2)
	}
	if modes["ignore-sigterm"] {
		signal.Ignore(syscall.SIGTERM)
	}
	if modes["slow-interrupt"] {
		a.slowInterrupt()
	}
	a.init()
	if modes["leak-secret"] {
		fmt.Fprintf(os.Stderr, "auth failed with key %s\n", os.Getenv("ANTHROPIC_API_KEY"))
		os.Exit(4)
	}
	if modes["snoop"] {
		snoop("snoop.txt")
	}
	if modes["crash-after-init"] {
		fmt.Fprintln(os.Stderr, "panic: something broke after init")
		os.Exit(3)
	}
}

// misbehave prints what the agent's reader must survive, and calls back
// into the wrapper, as the modes ask.
func (a *agent) misbehave(modes map[string]bool) {
	if modes["garbage"] {
		fmt.Println("this is not JSON")
		fmt.Println(`{"type":"mystery","x":1}`)
		fmt.Println(`{"truncated":`)
		fmt.Println(`[1,2,3]`)
		os.Stdout.Write([]byte{0xff, 0xfe, '\n'})
	}
	if modes["big-line"] {
		big := strings.Repeat("x", 50<<20)
		a.emit(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "content": big}}}})
	}
	if modes["api-retry"] && !a.droid {
		for i := 1; i <= 2; i++ {
			a.emit(map[string]any{"type": "system", "subtype": "api_retry", "attempt": i, "max_retries": 10, "retry_delay_ms": 500.5, "error_status": 529, "error": "overloaded"})
		}
	}
	if modes["progress"] {
		reportProgress()
	}
	if modes["orphans"] {
		_ = exec.Command(os.Args[0], "spawn-orphans", "100").Run()
	}
	if modes["strays"] {
		leaveStrays()
	}
}

// leaveStrays starts two sleepers of a minute that outlive the agent as a
// tool command would: one in a process group of its own (as Claude runs
// its tools), one in a session of its own (setsid); their pids go, a line
// each, into strays.pids in the working directory.
func leaveStrays() {
	var pids []string
	for _, attr := range []*syscall.SysProcAttr{{Setpgid: true}, {Setsid: true}} {
		c := exec.Command(os.Args[0], "sleep-ms", "60000")
		c.SysProcAttr = attr
		if c.Start() == nil {
			pids = append(pids, strconv.Itoa(c.Process.Pid))
		}
	}
	_ = os.WriteFile("strays.pids", []byte(strings.Join(pids, "\n")+"\n"), 0o644)
}

// reportProgress calls the wrapper's progress command, as an agent's tool
// call would.
func reportProgress() {
	bin := os.Getenv("WORKER_WRAPPER_BIN")
	if bin == "" {
		bin = "worker-wrapper"
	}
	out, err := exec.Command(bin, "progress", "--step", "Running tests", "--pct", "50", "--output", "3 passed").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "progress call failed: %v: %s\n", err, out)
	}
}

// hang takes the time the modes ask for: for ever, or sleepMS.
func (a *agent) hang(modes map[string]bool, sleepMS int) {
	if modes["hog"] {
		hog()
	}
	if modes["hang-after-turn"] { // one API call's usage, then no result
		a.assistant("working", 1)
		time.Sleep(time.Hour)
	}
	if modes["ignore-sigterm"] {
		time.Sleep(time.Hour)
	}
	if modes["slow-interrupt"] {
		a.assistant("working", 1)
		// Said after the turn is printed: a test waits for it before it
		// interrupts the turn.
		_ = os.WriteFile("first-turn.txt", nil, 0o644)
		time.Sleep(time.Hour)
	}
	if sleepMS > 0 {
		time.Sleep(time.Duration(sleepMS) * time.Millisecond)
	}
}

// slowInterrupt makes SIGINT end the process as slowly as an interrupted
// Claude under a CPU limit: its turn saved, then its result, then its exit.
func (a *agent) slowInterrupt() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT)
	go func() {
		<-sig
		time.Sleep(500 * time.Millisecond)
		_ = os.WriteFile("wound-down.txt", []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644)
		a.result("[Request interrupted by user]", true, nil)
		os.Exit(0)
	}()
}

// hog allocates anonymous memory, touched, without end: under a memory
// limit the OOM killer ends this process (it is the largest).
func hog() {
	var kept [][]byte
	for {
		chunk := make([]byte, 8<<20)
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = 1
		}
		kept = append(kept, chunk)
		time.Sleep(5 * time.Millisecond)
	}
}

// stopJSON is the stop block the agent's answer ends with.
func stopJSON(modes map[string]bool) string {
	switch {
	case modes["blocked"]:
		return `{"status": "blocked", "question": "Which branch?"}`
	case modes["failed"]:
		return `{"status": "failed", "result": {"reason": "tests cannot pass"}}`
	case modes["no-stop"]:
		return "I did it, no JSON."
	}
	return `{"status": "complete", "result": {"ok": true}}`
}

// progressBurst posts progress reports to the wrapper in quick succession.
func progressBurst() {
	for i := 0; i < 20; i++ {
		body := fmt.Sprintf(`{"step":"burst","output":"%d"}`, time.Now().UnixNano())
		req, _ := http.NewRequest(http.MethodPost, os.Getenv("WORKER_PROGRESS_URL"), strings.NewReader(body))
		req.Header.Set("X-Worker-Progress-Token", os.Getenv("WORKER_PROGRESS_TOKEN"))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// finish prints the result (or none), then exits or lingers as asked.
func (a *agent) finish(modes map[string]bool, stop string) {
	text := "Done.\n```json\n" + stop + "\n```"
	switch {
	case modes["no-result"]:
		os.Exit(0)
	case modes["is-error"]:
		a.result("API Error: 500 upstream failed", true, map[string]any{"api_error_status": 500})
		return
	case modes["schema"]:
		var so any
		_ = json.Unmarshal([]byte(stop), &so)
		if modes["no-stop"] {
			so = nil
		}
		a.result(text, false, map[string]any{"structured_output": so})
	default:
		a.result(text, false, nil)
	}
	switch {
	case modes["exit1-after-success"]:
		os.Exit(1)
	case modes["hang-after-result"]:
		time.Sleep(time.Hour)
	case modes["child-holds-stdout"]:
		c := exec.Command(os.Args[0], "sleep-ms", "60000")
		c.Stdout = os.Stdout
		_ = c.Start()
	}
}

// snoop tries what a hostile agent under the wrapper's uid would try to
// get the wrapper's secrets, and writes every attempt and its outcome
// (the bytes read, or the error) to path, for the test to search.
func snoop(path string) {
	var b strings.Builder
	try := func(what string, read func() ([]byte, error)) {
		data, err := read()
		if err != nil {
			fmt.Fprintf(&b, "== %s: error: %v\n", what, err)
			return
		}
		fmt.Fprintf(&b, "== %s: read %d bytes\n%s\n", what, len(data), data)
	}
	file := func(p string) func() ([]byte, error) { return func() ([]byte, error) { return os.ReadFile(p) } }
	for _, pid := range []string{"1", strconv.Itoa(os.Getppid())} {
		for _, f := range []string{"environ", "cmdline", "maps", "stack", "syscall", "auxv"} {
			try("/proc/"+pid+"/"+f, file("/proc/"+pid+"/"+f))
		}
		try("/proc/"+pid+"/mem", func() ([]byte, error) {
			f, err := os.Open("/proc/" + pid + "/mem")
			if err != nil {
				return nil, err
			}
			defer f.Close()
			buf := make([]byte, 4096)
			n, err := f.ReadAt(buf, 0x400000) // where a static Go binary's text starts
			return buf[:n], err
		})
		try("/proc/"+pid+"/fd", func() ([]byte, error) {
			ents, err := os.ReadDir("/proc/" + pid + "/fd")
			if err != nil {
				return nil, err
			}
			var out []byte
			for _, e := range ents {
				fd := "/proc/" + pid + "/fd/" + e.Name()
				target, _ := os.Readlink(fd)
				if !strings.HasPrefix(target, "/") { // a socket or pipe: reading it would block
					out = fmt.Appendf(out, "fd %s: %s\n", e.Name(), target)
					continue
				}
				data, err := os.ReadFile(fd)
				out = fmt.Appendf(out, "fd %s: %s, %d bytes, %v: %s\n", e.Name(), target, len(data), err, data)
			}
			return out, nil
		})
		try("ptrace attach "+pid, func() ([]byte, error) {
			p, _ := strconv.Atoi(pid)
			if err := syscall.PtraceAttach(p); err != nil {
				return nil, err
			}
			_ = syscall.PtraceDetach(p)
			return []byte("attached"), nil
		})
	}
	try("own environment", func() ([]byte, error) { return []byte(strings.Join(os.Environ(), "\n")), nil })
	try("/proc/self/environ", file("/proc/self/environ"))
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err == nil {
			try("/proc/"+p.Name()+"/cmdline", file("/proc/"+p.Name()+"/cmdline"))
			try("/proc/"+p.Name()+"/environ", file("/proc/"+p.Name()+"/environ"))
		}
	}
	home, _ := os.UserHomeDir()
	for _, f := range []string{".factory/settings.json", ".claude.json", ".claude/settings.json"} {
		try("~/"+f, file(home+"/"+f))
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

// fill writes 1 MiB blocks to a file in each directory a worker may
// write until a write fails (at most 4 GiB each), as an agent filling
// its disk would, and tries to write where it may not.
func fill() map[string]any {
	out := map[string]any{}
	home, _ := os.UserHomeDir()
	block := make([]byte, 1<<20)
	for _, d := range [][2]string{{"home", home}, {"tmp", "/tmp"}, {"var_tmp", "/var/tmp"}, {"workspace", "."}} {
		name, dir := d[0], d[1]
		f, err := os.Create(dir + "/fill-" + name)
		if err != nil {
			out[name] = map[string]any{"bytes": 0, "err": err.Error()}
			continue
		}
		var n int64
		for n < 4<<30 {
			var w int
			w, err = f.Write(block)
			n += int64(w)
			if err != nil {
				break
			}
		}
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		e := ""
		if err != nil {
			e = err.Error()
		}
		out[name] = map[string]any{"bytes": n, "err": e}
		if name != "workspace" {
			os.Remove(f.Name()) // the workspace's stays full: the wrapper sees it so
		}
	}
	if err := os.WriteFile("/fill-root", []byte("x"), 0o644); err != nil {
		out["root"] = err.Error()
	} else {
		out["root"] = "written"
	}
	return out
}
