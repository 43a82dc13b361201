package redisconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestURLFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.env")
	body := "# the project's Redis\n\nREDIS_MANAGER_URL=redis://manager:pw1@127.0.0.1:6379/0\nexport REDIS_CONSUMER_URL=\"redis://consumer:pw2@127.0.0.1:6379/0\"\nEMPTY=\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		ManagerURLName:  "redis://manager:pw1@127.0.0.1:6379/0",
		ConsumerURLName: "redis://consumer:pw2@127.0.0.1:6379/0",
	} {
		if got, err := URLFromFile(path, name); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"EMPTY", "MISSING"} {
		if _, err := URLFromFile(path, name); err == nil || !strings.Contains(err.Error(), "has no "+name) {
			t.Errorf("%s: err = %v, want one saying the file has none", name, err)
		}
	}
	if _, err := URLFromFile(filepath.Join(t.TempDir(), "none"), ManagerURLName); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestDefaultURLPrefersTheEnvironment(t *testing.T) {
	t.Setenv(ConsumerURLName, "redis://consumer:x@10.0.0.1:6379/0")
	if got, err := DefaultURL(ConsumerURLName); err != nil || got != "redis://consumer:x@10.0.0.1:6379/0" {
		t.Errorf("DefaultURL = %q, %v", got, err)
	}
}
