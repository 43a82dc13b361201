package faults

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Kubernetes cases' rows, written as JSON lines by the k8s module,
// are read back whole and get FAULTS.md's second table and case list.
func TestKubernetesRowsInFaultsFile(t *testing.T) {
	dir := t.TempDir()
	k8s := []Row{
		{Case: "k8s: node lost mid-task", Fault: "node 2 killed.", RecoveredMeans: "the next task served.", DetectedMeans: "to the failed Output.",
			Tasks: 3, Detection: "5.8s", Recovery: "27s", Pass: true, Notes: "the task answered failed KILLED", Took: 90 * time.Second},
		{Case: "k8s: kubelet restarted mid-task", Tasks: 2, Orphans: 1, Detection: "—", Recovery: "4s", Notes: "pod x left (Running)"},
	}
	rows := filepath.Join(dir, "rows.jsonl")
	var lines []string
	for _, r := range k8s {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(rows, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRows(rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != k8s[0] || got[1] != k8s[1] {
		t.Fatalf("read back %+v, want %+v", got, k8s)
	}
	if none, err := ReadRows(filepath.Join(dir, "missing.jsonl")); err != nil || none != nil {
		t.Fatalf("a missing file: %v, %v; want no rows and no error", none, err)
	}

	out := filepath.Join(dir, "FAULTS.md")
	if err := WriteFile(out, []Row{{Case: "docker case", Tasks: 1, Pass: true}}, got, time.Minute); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	doc := string(b)
	_, k8sPart, ok := strings.Cut(doc, "\n## On Kubernetes\n")
	if !ok {
		t.Fatalf("no section On Kubernetes:\n%s", doc)
	}
	for _, want := range []string{"| k8s: node lost mid-task | 3 | 0 | 0 | 0 | 5.8s | 27s | ✓ |", "| k8s: kubelet restarted mid-task | 2 | 0 | 0 | 1 | — | 4s | FAIL | pod x left (Running) |",
		"- **k8s: node lost mid-task** (1m30s). node 2 killed. *Recovered:* the next task served. *Detection:* to the failed Output."} {
		if !strings.Contains(k8sPart, want) {
			t.Errorf("the Kubernetes section lacks %q:\n%s", want, k8sPart)
		}
	}
	if strings.Contains(k8sPart, "docker case") {
		t.Error("a Docker case in the Kubernetes section")
	}
}
