package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Row is one case's line of FAULTS.md.
type Row struct {
	Case           string
	Fault          string // what is injected
	RecoveredMeans string // what "recovered" means in the case
	DetectedMeans  string // what the detection time measures, if the case has one
	Tasks          int    // requests sent: tasks and commands, each to be answered once
	Lost           int
	Duplicated     int
	Orphans        int
	Detection      string // time to the runtime's first answer to the fault, where the case can see one
	Recovery       string
	Pass           bool
	Notes          string
	Took           time.Duration
}

var rows struct {
	sync.Mutex
	list []Row
}

func record(r Row) {
	rows.Lock()
	defer rows.Unlock()
	rows.list = append(rows.list, r)
}

// Rows returns the rows recorded so far, in the order the cases ended.
func Rows() []Row {
	rows.Lock()
	defer rows.Unlock()
	return append([]Row(nil), rows.list...)
}

func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// Table is the markdown table of rows.
func Table(rs []Row) string {
	var b strings.Builder
	b.WriteString("| Case | Tasks | Lost | Duplicated | Orphans | Detection | Recovery time | Result | What went wrong |\n")
	b.WriteString("|---|---:|---:|---:|---:|---|---|:---:|---|\n")
	for _, r := range rs {
		result := "✓"
		if !r.Pass {
			result = "FAIL"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s | %s | %s |\n", cell(r.Case), r.Tasks, r.Lost, r.Duplicated, r.Orphans,
			cell(r.Detection), cell(r.Recovery), result, cell(r.Notes))
	}
	return b.String()
}

// ReadRows reads the rows of the Kubernetes fault cases (k8s/faults_test.go)
// from path, one JSON document a line with Row's field names, as
// `make faults` has them written (FAULTS_K8S_OUT). A missing file is no
// rows.
func ReadRows(path string) ([]Row, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []Row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var r Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("faults: a row of %s: %w", path, err)
		}
		rs = append(rs, r)
	}
	return rs, sc.Err()
}

// WriteFile writes FAULTS.md: the table, then what each case does and
// what recovered means in it; then the same of the Kubernetes cases
// (k8s), when there are any.
func WriteFile(path string, rs, k8s []Row, took time.Duration) error {
	var b strings.Builder
	b.WriteString("# Fault suite\n\n")
	fmt.Fprintf(&b, "Written by `make faults` (the Go module `faults/`) on %s: %d cores, %s, Docker engine %s, %s; LEASE_TTL=%s given to the managers; %s. The suite took %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.Version(), dockerVersion(), redisVersion(),
		Lease(), longNote(), took.Round(time.Second))
	b.WriteString("Each case runs real `worker-manager` processes (bin/worker-manager, configured by the environment only), a real Redis per case (append-only file fsynced on every write), and real worker containers whose agent is the wrapper's fake agent, injects one fault, and counts:\n\n")
	b.WriteString("- **tasks**: the requests it sent, tasks and commands alike, each of which must be answered exactly once (a task by one Output on its worker's output stream, a command by one Reply);\n")
	b.WriteString("- **lost**: requests without an answer within the case's bound, or whose answer is not what the case demands (a task of a healthy worker answered `failed KILLED`, a create refused while a slot is free);\n")
	b.WriteString("- **duplicated**: requests answered more than once;\n")
	b.WriteString("- **orphans**: containers of the case's key prefix left after a final shutdown of its managers (SIGTERM, SIGKILL past the stop timeout + 5 s), plus workers that should not exist (an unrequested replacement, a worker re-created without end);\n")
	b.WriteString("- **detection**: from the fault to the runtime's first visible answer to it (a failed Output, a replacement, a refusal), where the case has one (defined per case below);\n")
	b.WriteString("- **recovery time**: from the fault to the moment the case counts as recovered (defined per case below).\n\n")
	b.WriteString("The workers are sealed, as by default (`WORKER_NETWORK_MODE=sealed`): their containers have no network, and their wrappers reach Redis through the unix sockets of a real `worker-gateway` (bin/worker-gateway), one per host: one per case, one per simulated host in the fleet cases; in the Sentinel cases it relays to the primary the sentinels name.\n\n")
	b.WriteString("Goal: 0 lost, 0 duplicated, 0 orphans in every row, and every case recovered within its bound. A case that misses it fails its test. ")
	b.WriteString("[faults/BEFORE-LEASES.md](faults/BEFORE-LEASES.md) is the same suite on the code before the control plane's leases and claims.\n\n")
	b.WriteString(Table(rs))
	b.WriteString("\n## The cases\n\n")
	writeCases(&b, rs)
	if len(k8s) > 0 {
		b.WriteString("\n## On Kubernetes\n\n")
		b.WriteString("The Kubernetes cases (the Go module `k8s/`, [docs/kubernetes.md](docs/kubernetes.md#faults)) run first, on the cluster of `make k8s` (one node on this machine; a second, with its own kubelet and containerd, for the node lost): a real `worker-manager` with `WORKER_ENGINE=kubernetes` under its own service account, a Redis of its own, the fake agent in the workers' pods (on the node's network). They count the same: **tasks** are the requests sent (tasks and commands), **orphans** the pods and volume claims left in the case's namespace after the final shutdown of its managers (SIGTERM), and its keys that would outlive it: a registered worker without a status, a status that never expires of a worker neither registered nor hibernated, a heartbeat of one not registered.\n\n")
		b.WriteString(Table(k8s))
		b.WriteString("\n")
		writeCases(&b, k8s)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeCases writes what each case of rs does and what recovered and
// detection mean in it.
func writeCases(b *strings.Builder, rs []Row) {
	for _, r := range rs {
		fmt.Fprintf(b, "- **%s** (%s). %s *Recovered:* %s", r.Case, r.Took.Round(time.Second), r.Fault, r.RecoveredMeans)
		if r.DetectedMeans != "" {
			fmt.Fprintf(b, " *Detection:* %s", r.DetectedMeans)
		}
		b.WriteString("\n")
	}
}

func longNote() string {
	if Long() {
		return "FAULTS_LONG=1 (the long cases ran)"
	}
	return "without FAULTS_LONG (the long cases did not run)"
}

func dockerVersion() string {
	out, err := docker("version", "-f", "{{.Server.Version}} (API {{.Server.APIVersion}})")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "redis-server ?"
	}
	f := strings.Fields(string(out))
	for _, w := range f {
		if v, ok := strings.CutPrefix(w, "v="); ok {
			return "redis-server " + v
		}
	}
	return strings.TrimSpace(string(out))
}
