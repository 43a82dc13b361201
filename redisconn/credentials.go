package redisconn

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// CredentialsFile is where scripts/redis.sh, which starts the project's
// Redis (the default user off), keeps its URLs, one NAME=value a line:
// REDIS_MANAGER_URL (the worker-manager's user, which makes the workers'
// users) and REDIS_CONSUMER_URL (the clients': workerctl, the examples).
const CredentialsFile = "/var/lib/agentvisor/redis/credentials.env"

// Names of the URLs in CredentialsFile.
const (
	ManagerURLName  = "REDIS_MANAGER_URL"
	ConsumerURLName = "REDIS_CONSUMER_URL"
)

// DefaultURL returns the Redis URL of a program whose REDIS_URL was not
// given: the variable name (ManagerURLName or ConsumerURLName) of the
// environment, else of CredentialsFile. The error says how to give one.
func DefaultURL(name string) (string, error) {
	if v := os.Getenv(name); v != "" {
		return v, nil
	}
	v, err := URLFromFile(CredentialsFile, name)
	if err != nil {
		return "", fmt.Errorf("REDIS_URL is not set and %w (the project's Redis: `bash scripts/redis.sh` writes it; or set REDIS_URL)", err)
	}
	return v, nil
}

// URLFromFile returns the value of name in an env file of NAME=value
// lines (# comments, blank lines; an optional `export `, optional quotes).
func URLFromFile(path, name string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s cannot be read: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != name {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		if v == "" {
			break
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s cannot be read: %w", path, err)
	}
	return "", fmt.Errorf("%s has no %s", path, name)
}
