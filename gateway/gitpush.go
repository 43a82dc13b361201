package gateway

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentvisor/agentvisor/protocol"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// Pushes through a credential go to the task's branch only. The gateway
// holds the credential, so it is the one place that can say where a
// worker may push: it reads the ref-update commands of git's smart HTTP
// receive-pack request (and, for an update, the pack) before anything
// reaches the upstream, and lets through a push only when every command
// updates refs/heads/<the task's branch> of the task's repository, and
// (unless the task allows a force push) as a fast-forward. A tag, another
// branch, a delete, a force push, a push to another repository and any
// push while no task names a branch are refused 403 like other egress
// refusals.
//
// The branch is the wrapper's to give (the push grant): it reads it from
// the task and puts it to egress.sock (PUT /agentvisor/git-push) with the
// worker's token, which the agent, beside it in the container, cannot
// read (the same token model.sock wants). So the agent may use its
// branch, and cannot name another. The grant is kept in the worker's
// directory (gitgrant.go), so a gateway restarted during the task still
// has it; the wrapper puts it again before its own push all the same.

// GitGrantPath is the path, on egress.sock, of a worker's push grant:
// PUT (a GitGrant, JSON) with the worker's token in ModelTokenHeader,
// DELETE to end it.
const GitGrantPath = "/agentvisor/git-push"

// RefusedReasonHeader says why, on the 403 of a refused push: the
// wrapper shows it with the refusal.
const RefusedReasonHeader = "X-Agentvisor-Refused-Reason"

// maxPushBytes bounds one push request's body, spooled to a temporary
// file while its commands and pack are read.
var maxPushBytes int64 = 2 << 30

// GitGrant is where a worker may push: the task's repository and branch.
type GitGrant struct {
	Remote         string `json:"remote"` // https://host/path(.git)
	Branch         string `json:"branch"` // a branch name, without refs/heads/
	AllowForcePush bool   `json:"allow_force_push,omitempty"`
}

// pushGrant is a GitGrant as the guard compares it.
type pushGrant struct {
	host, repo, ref string
	force           bool
}

// parseGrant checks g.
func parseGrant(g GitGrant) (*pushGrant, error) {
	u, err := url.Parse(g.Remote)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.User != nil {
		return nil, fmt.Errorf("remote %q: want an https:// URL without user information", g.Remote)
	}
	if g.Branch == "" || strings.HasPrefix(g.Branch, "refs/") || strings.ContainsAny(g.Branch, " \t\r\n\x00~^:?*[\\") || strings.Contains(g.Branch, "..") {
		return nil, fmt.Errorf("branch %q: want a branch name", g.Branch)
	}
	t, err := parseTarget(u.Hostname(), "443")
	if err != nil {
		return nil, fmt.Errorf("remote %q: %v", g.Remote, err)
	}
	return &pushGrant{host: t.host(), repo: repoPath(u.Path), ref: "refs/heads/" + g.Branch, force: g.AllowForcePush}, nil
}

// repoPath is a repository's URL path as pushes are compared by it: no
// trailing slash, no .git.
func repoPath(p string) string {
	p = strings.TrimSuffix(p, "/")
	return strings.TrimSuffix(p, ".git")
}

// serveGrant answers PUT and DELETE of GitGrantPath.
func (e *egress) serveGrant(rw http.ResponseWriter, r *http.Request) {
	if !e.w.modelTokenOK(r.Header.Get(ModelTokenHeader)) {
		e.side.log.Warn("git push grant refused: not the worker's token", "method", r.Method)
		http.Error(rw, "agentvisor gateway: a push grant needs the worker's token", http.StatusForbidden)
		return
	}
	switch r.Method {
	case http.MethodDelete:
		if err := e.w.setPushGrant(nil, nil); err != nil {
			e.side.log.Error("git push grant not removed", "err", err)
			http.Error(rw, "agentvisor gateway: the grant could not be removed", http.StatusInternalServerError)
			return
		}
		rw.WriteHeader(http.StatusNoContent)
	case http.MethodPut:
		var g GitGrant
		dec := json.NewDecoder(io.LimitReader(r.Body, 16<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&g); err != nil {
			badRequest(rw, "git push grant: "+err.Error())
			return
		}
		pg, err := parseGrant(g)
		if err != nil {
			badRequest(rw, "git push grant: "+err.Error())
			return
		}
		if err := e.w.setPushGrant(&g, pg); err != nil {
			e.side.log.Error("git push grant not kept", "err", err)
			http.Error(rw, "agentvisor gateway: the grant could not be kept", http.StatusInternalServerError)
			return
		}
		e.side.log.Info("git push grant", "host", pg.host, "repo", pg.repo, "ref", pg.ref, "force", pg.force)
		rw.WriteHeader(http.StatusNoContent)
	default:
		rw.Header().Set("Allow", "PUT, DELETE")
		http.Error(rw, "agentvisor gateway: PUT or DELETE", http.StatusMethodNotAllowed)
	}
}

// isReceivePack reports whether r is a push's ref-update request.
func isReceivePack(r *http.Request) bool {
	return strings.HasSuffix(r.URL.Path, "/git-receive-pack")
}

// pushRefused is a push the guard refuses: the ref it names (or "") and
// why.
type pushRefused struct{ ref, why string }

func (p *pushRefused) Error() string {
	if p.ref == "" {
		return p.why
	}
	return "push to " + p.ref + ": " + p.why
}

// guardPush reads the body of the receive-pack request r (for t) into a
// temporary file, checks its commands against the worker's grant, and
// makes r's body that file again; it answers the request and reports
// false when the push is refused. The caller closes the body it returns.
func (e *egress) guardPush(rw http.ResponseWriter, r *http.Request, t target) (io.Closer, bool) {
	g := e.w.pushGrant()
	if g == nil {
		e.refusePush(rw, t, &pushRefused{why: "no task of the worker names a branch to push to"})
		return nil, false
	}
	if t.host() != g.host || repoPath(strings.TrimSuffix(r.URL.Path, "/git-receive-pack")) != g.repo {
		e.refusePush(rw, t, &pushRefused{why: "not the task's repository (" + g.host + g.repo + ")"})
		return nil, false
	}
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			badRequest(rw, "git push: a gzip body that is not: "+err.Error())
			return nil, false
		}
		body = zr
	default:
		badRequest(rw, "git push: content encoding "+strconv.Quote(enc))
		return nil, false
	}
	f, err := os.CreateTemp("", "agentvisor-push-*")
	if err != nil {
		e.side.log.Error("git push: spool", "err", err)
		http.Error(rw, "agentvisor gateway: cannot hold the push", http.StatusInternalServerError)
		return nil, false
	}
	_ = os.Remove(f.Name()) // gone with its descriptor
	limited := &io.LimitedReader{R: body, N: maxPushBytes + 1}
	br := bufio.NewReader(io.TeeReader(limited, f))
	checkErr := checkPush(br, g)
	_, copyErr := io.Copy(io.Discard, br) // the rest, spooled
	size, _ := f.Seek(0, io.SeekCurrent)
	switch {
	case limited.N <= 0:
		f.Close()
		e.refusePush(rw, t, &pushRefused{why: fmt.Sprintf("a push of more than %d bytes", maxPushBytes)})
		return nil, false
	case copyErr != nil:
		f.Close()
		badRequest(rw, "git push: reading the request: "+copyErr.Error())
		return nil, false
	case checkErr != nil:
		f.Close()
		if pr, ok := errors.AsType[*pushRefused](checkErr); ok {
			e.refusePush(rw, t, pr)
		} else {
			e.refusePush(rw, t, &pushRefused{why: "the push cannot be read: " + checkErr.Error()})
		}
		return nil, false
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		http.Error(rw, "agentvisor gateway: cannot hold the push", http.StatusInternalServerError)
		return nil, false
	}
	r.Body, r.ContentLength, r.TransferEncoding = f, size, nil
	r.Header.Del("Content-Encoding")
	r.Header.Set("Content-Length", strconv.FormatInt(size, 10))
	e.side.stats.gitPushes.Add(1)
	return f, true
}

const zeroID = "0000000000000000000000000000000000000000"

// refUpdate is one command of a push.
type refUpdate struct{ old, new, ref string }

// checkPush reads a receive-pack request body (pkt-lines of commands, a
// flush, push options when asked, then the pack) and checks it against g.
func checkPush(br *bufio.Reader, g *pushGrant) error {
	var (
		cmds []refUpdate
		caps string
	)
	for {
		line, flush, err := readPktLine(br)
		if err != nil {
			return err
		}
		if flush {
			break
		}
		if len(cmds) == 0 && caps == "" {
			if l, c, ok := strings.Cut(line, "\x00"); ok {
				line, caps = l, c
			}
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "shallow "):
			continue
		case strings.HasPrefix(line, "push-cert"):
			return &pushRefused{why: "signed pushes are not supported"}
		}
		f := strings.Fields(line)
		if len(f) != 3 || len(f[0]) != 40 || len(f[1]) != 40 {
			return fmt.Errorf("a command %q", line)
		}
		cmds = append(cmds, refUpdate{old: f[0], new: f[1], ref: f[2]})
	}
	if strings.Contains(caps, "object-format=sha256") {
		return &pushRefused{why: "sha256 repositories are not supported"}
	}
	if len(cmds) == 0 {
		// git's probe before a large push ("0000" alone): it updates
		// nothing.
		return nil
	}
	for _, c := range cmds {
		switch {
		case strings.HasPrefix(c.ref, "refs/tags/"):
			return &pushRefused{ref: c.ref, why: "a tag: the task may push its branch " + g.ref + " only"}
		case c.ref != g.ref:
			return &pushRefused{ref: c.ref, why: "not the task's branch " + g.ref}
		case c.new == zeroID:
			return &pushRefused{ref: c.ref, why: "a delete of the task's branch"}
		}
	}
	if slicesContainsCap(caps, "push-options") {
		for {
			_, flush, err := readPktLine(br)
			if err != nil {
				return err
			}
			if flush {
				break
			}
		}
	}
	commits, err := readPackCommits(br)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if c.old == zeroID || g.force {
			continue
		}
		if !commits.fastForward(c.old, c.new) {
			return &pushRefused{ref: c.ref, why: "not a fast-forward of " + c.old[:12] + " (a force push; the task does not allow one)"}
		}
	}
	return nil
}

func slicesContainsCap(caps, name string) bool {
	for _, c := range strings.Fields(caps) {
		if c == name {
			return true
		}
	}
	return false
}

// readPktLine reads one pkt-line: its payload, or flush for 0000.
func readPktLine(br *bufio.Reader) (string, bool, error) {
	var n [4]byte
	if _, err := io.ReadFull(br, n[:]); err != nil {
		return "", false, fmt.Errorf("pkt-line: %w", err)
	}
	size, err := strconv.ParseUint(string(n[:]), 16, 16)
	if err != nil {
		return "", false, fmt.Errorf("pkt-line length %q", n[:])
	}
	switch {
	case size == 0:
		return "", true, nil
	case size < 4:
		return "", false, fmt.Errorf("pkt-line length %d", size)
	}
	b := make([]byte, size-4)
	if _, err := io.ReadFull(br, b); err != nil {
		return "", false, fmt.Errorf("pkt-line: %w", err)
	}
	return string(b), false, nil
}

// refusePush answers 403 for a refused push, naming t and why, as other
// egress refusals (the wrapper publishes it as a warning), counts and
// logs it.
func (e *egress) refusePush(rw http.ResponseWriter, t target, pr *pushRefused) {
	e.side.stats.egressRefused.Add(1)
	e.side.stats.gitPushRefused.Add(1)
	// A header value: printable ASCII and spaces only (a ref is the
	// container's to spell).
	why := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, pr.Error())
	e.side.log.Info("git push refused", "host", t.host(), "port", t.port, "why", why)
	e.side.refused(Refusal{Tool: protocol.RefusedToolNetwork, Code: protocol.RefusedGitPush, Request: "git push " + printable(t.String()),
		Host: printable(t.host()), Port: int(t.port), Reason: why})
	rw.Header().Set(RefusedHeader, printable(t.String()))
	rw.Header().Set(RefusedReasonHeader, why)
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("X-Content-Type-Options", "nosniff")
	rw.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(rw, "agentvisor gateway: refused: git %s\n", why)
}
