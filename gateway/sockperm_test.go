package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/agentvisor/agentvisor/testkit"
)

// connectAs tries to connect to the unix socket path as uid, in a process
// of its own (Debian's python3, /usr/bin: reachable by every user), and
// returns what it printed.
func connectAs(t *testing.T, uid int, path string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", `import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("CONNECTED")
except OSError as e:
    print("REFUSED", e.strerror)`, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 as uid %d: %v: %s", uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A worker's sockets are the container's uid's and root's: another user
// of the host (uid 1001 here, and nobody) cannot connect to any of them,
// the worker's uid (GATEWAY_WORKER_UID, 1000 by default) and root can.
func TestWorkerSocketsOnlyForTheWorkersUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs processes as other users: run it as root (make test does)")
	}
	r := testkit.StartRedis(t)
	model := httptest.NewServer(http.NotFoundHandler())
	defer model.Close()
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil { // the test's temporary root, traversable as GATEWAY_DIR is
		t.Fatal(err)
	}
	_, c := startGateway(t, dir, r.Addr, model.Listener.Addr().String())
	if err := c.Open(context.Background(), "w1", nil); err != nil {
		t.Fatal(err)
	}
	for _, sock := range []string{RedisSocket, ModelSocket, EgressSocket} {
		path := sockOf(dir, "w1", sock)
		for _, c := range []struct {
			uid  int
			want string
		}{{DefaultWorkerUID, "CONNECTED"}, {0, "CONNECTED"}, {1001, "REFUSED"}, {65534, "REFUSED"}} {
			if got := connectAs(t, c.uid, path); !strings.HasPrefix(got, c.want) {
				t.Errorf("%s as uid %d: %s, want %s", sock, c.uid, got, c.want)
			}
		}
	}
}
