package faults

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMain runs the cases, then prints their table; with FAULTS_OUT set
// (`make faults` sets it to the repository's FAULTS.md) it writes the file
// too, with the Kubernetes cases' rows of the file FAULTS_K8S_ROWS names
// (`make faults` has the k8s module write it first). A case's row is
// recorded whether it passed or not.
func TestMain(m *testing.M) {
	t0 := time.Now()
	SweepStale()
	SweepStaleFleets()
	code := m.Run()
	rs := Rows()
	if len(rs) > 0 {
		fmt.Printf("\nfault suite (%s):\n%s", time.Since(t0).Round(time.Second), Table(rs))
	}
	// The Kubernetes cases' rows, which `make faults` has the k8s module
	// write before this suite runs.
	var k8s []Row
	if path := os.Getenv("FAULTS_K8S_ROWS"); path != "" {
		var err error
		if k8s, err = ReadRows(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
		if len(k8s) > 0 {
			fmt.Printf("\nfault suite on Kubernetes (k8s/, from %s):\n%s", path, Table(k8s))
		}
	}
	if out := os.Getenv("FAULTS_OUT"); out != "" && len(rs) > 0 {
		if err := WriteFile(out, rs, k8s, time.Since(t0)); err != nil {
			fmt.Fprintln(os.Stderr, "faults: write", out+":", err)
			code = 1
		} else {
			fmt.Println("faults: wrote", out)
		}
	}
	os.Exit(code)
}
