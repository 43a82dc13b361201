package worker

import (
	"os"
	"strconv"
	"strings"
)

// cgroup files that count the OOM killer's kills in this container's
// memory cgroup: cgroup v2, then v1.
var oomFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// oomKills returns how many processes the OOM killer has killed in this
// cgroup, or -1 when the counter cannot be read (not in a container, no
// memory controller).
func oomKills() int64 {
	for _, f := range oomFiles {
		if n, ok := readOOMKills(f); ok {
			return n
		}
	}
	return -1
}

func readOOMKills(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parseOOMKills(string(b))
}

// parseOOMKills reads the "oom_kill N" line of memory.events (v2) or
// memory.oom_control (v1).
func parseOOMKills(s string) (int64, bool) {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
