package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
)

// gitClone has the sealed Claude worker's agent clone the private git
// host over HTTPS: its git reaches the gateway in plain HTTP through the
// egress proxy, and the gateway adds the Basic credential and speaks
// HTTPS upstream. The demo checks that the clone got the commit, that
// every request reached the host with the credential, and that the token
// is nowhere in the worker.
func (d *demo) gitClone(ctx context.Context, id string) error {
	d.tl.section("a sealed worker's egress: an allowed git clone over HTTPS, with a credential the gateway adds")
	sent, err := d.put(ctx, id, projectShop, "shop-clone", promptClone, scriptClone)
	if err != nil {
		return err
	}
	if err := d.awaitClone(ctx, sent.RequestID); err != nil {
		return err
	}
	// The agent waits for the model's last answer: its container runs.
	if err := d.noTokenInWorker(ctx, id); err != nil {
		return err
	}
	if _, err := d.await(ctx, sent, protocol.StatusComplete, nil); err != nil {
		return err
	}
	authed, unauthed := d.git.requests()
	if authed < 2 || unauthed != 0 {
		return fmt.Errorf("task %s: the git host got %d requests with the credential and %d without; want the clone's (2 or more), all with it", sent.RequestID, authed, unauthed)
	}
	d.tl.say("git host: %d requests with the credential, 0 without: the gateway added it to each of the clone's", authed)
	return d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second)
}

// awaitClone waits until the clone has run: with the stub, the model got
// git log's output (the commit's subject) back from the agent's shell
// tool; with the real API, the git host has served it.
func (d *demo) awaitClone(ctx context.Context, requestID string) error {
	err := poll(ctx, 50*time.Millisecond, 3*time.Minute, func() (bool, error) {
		if d.stub == nil {
			authed, _ := d.git.requests()
			if authed >= 2 {
				d.tl.say("cloned %s through the gateway with the credential it added (the git host served it)", gitCloneURL)
			}
			return authed >= 2, nil
		}
		text := d.lastModelText()
		end := strings.Index(text, gitSubject)
		if end < 0 {
			return false, nil
		}
		// The log's line: the commit's short hash, its subject.
		start := max(strings.LastIndex(text[:end], "\n")+1, end-20)
		line := strings.TrimSpace(text[start : end+len(gitSubject)])
		d.tl.say("cloned %s through the gateway with the credential it added: git -C shop log --oneline shows %q", gitCloneURL, line)
		return true, nil
	})
	if errors.Is(err, errTimedOut) {
		authed, unauthed := d.git.requests()
		return fmt.Errorf("task %s: the clone did not happen within 3 min (the git host got %d requests with the credential, %d without; the gateway's log: %s/worker-gateway.log)",
			requestID, authed, unauthed, d.logDir)
	}
	return err
}

// noTokenInWorker looks for the git host's token in the worker's
// container (docker exec): in every process's environment and arguments,
// and in the files of its home directory (git's configuration, the
// clone's .git), /tmp, /etc and /run. The processes are read by a command
// that does not carry the token, which is then looked for here; the file
// search carries it and prints only the names of the files holding it.
func (d *demo) noTokenInWorker(ctx context.Context, id string) error {
	name := spawner.ContainerName(id)
	procs, err := dockerExec(ctx, name, "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'")
	if err != nil {
		return err
	}
	if !strings.Contains(procs, "=url.http://"+gitHostIP+"/.insteadOf") {
		return fmt.Errorf("worker %s: no process of the agent has git's insteadOf for %s (GIT_CONFIG_* from CREDENTIAL_HOSTS)", d.tl.name(id), gitHostIP)
	}
	for _, s := range d.git.secrets() {
		if strings.Contains(procs, s) {
			return fmt.Errorf("worker %s: the git host's token is in a process's environment or arguments", d.tl.name(id))
		}
	}
	search := "grep -rIl -F"
	for _, s := range d.git.secrets() {
		search += " -e " + s
	}
	files, err := dockerExec(ctx, name, search+" /home /tmp /etc /run 2>/dev/null; true")
	if err != nil {
		return err
	}
	if files = strings.TrimSpace(files); files != "" {
		return fmt.Errorf("worker %s: the git host's token is in its files: %s", d.tl.name(id), files)
	}
	d.tl.say("the token is in none of %s's environment, processes, files or git config (docker exec: /proc/*/environ and cmdline; grep -r /home /tmp /etc /run: nothing)", d.tl.name(id))
	return nil
}

// dockerExec runs a shell command in the container and returns what it
// printed.
func dockerExec(ctx context.Context, container, script string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "exec", container, "sh", "-c", script).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker exec %s: %v: %s", container, err, out)
	}
	return string(out), nil
}
