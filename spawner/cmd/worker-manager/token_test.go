package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/testkit"
)

// A manager given no operator token makes one and writes it to a file
// of mode 0600 in a directory of its own; its log names the file and
// never holds the token. The token in the file opens /metrics.
func TestMadeOpsTokenIsWrittenToAFileNotTheLog(t *testing.T) {
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	keys := protocol.Keys{Prefix: fmt.Sprintf("tok%d", time.Now().UnixNano())}
	out := filepath.Join(t.TempDir(), "state", "ops-token")
	env := map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": keys.Prefix, "MANAGER_ID": "tok-test",
		"METRICS_ADDR": "127.0.0.1:0", "OPS_TOKEN_OUT": out, "WORKER_NETWORK_MODE": "host"}
	var logBuf testkit.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, slog.New(slog.NewJSONHandler(&logBuf, nil)))
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("worker-manager exited %d", code)
		}
	}()
	var addr string
	testkit.Eventually(t, "the manager's metrics address", 15*time.Second, func() bool {
		ms, _ := spawner.ListManagers(ctx, rc, keys)
		if len(ms) == 1 {
			addr = ms[0].MetricsAddr
		}
		return addr != ""
	})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no token file: %v; the log:\n%s", err, logBuf.String())
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 {
		t.Fatalf("the token file holds %q", b)
	}
	for path, want := range map[string]os.FileMode{out: 0o600, filepath.Dir(out): 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics with the file's token: %d", resp.StatusCode)
	}
	logs := logBuf.String()
	if strings.Contains(logs, token) {
		t.Errorf("the log holds the operator token:\n%s", logs)
	}
	if !strings.Contains(logs, `"token_file":"`+out+`"`) {
		t.Errorf("the log does not name the token file %s:\n%s", out, logs)
	}
}

// A token file's directory that others may write in is refused: the
// manager serves no dashboard rather than a token someone could swap.
func TestTokenFileRefusesADirectoryOthersWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := spawner.Config{Keys: protocol.Keys{Prefix: "p"}, ManagerID: "m"}
	if _, _, err := opsToken(cfg, spawner.OpsConfig{OpsTokenOut: filepath.Join(dir, "t")}); err == nil || !strings.Contains(err.Error(), "OPS_TOKEN_OUT") {
		t.Fatalf("a token file in a 0777 directory: %v, want refused naming OPS_TOKEN_OUT", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "t")); !os.IsNotExist(err) {
		t.Errorf("the token file was written anyway: %v", err)
	}
}
