package faults

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMain runs the cases, then prints their table; with FAULTS_OUT set
// (`make faults` sets it to the repository's FAULTS.md) it writes the file
// too. A case's row is recorded whether it passed or not.
func TestMain(m *testing.M) {
	t0 := time.Now()
	SweepStale()
	SweepStaleFleets()
	code := m.Run()
	rs := Rows()
	if len(rs) > 0 {
		fmt.Printf("\nfault suite (%s):\n%s", time.Since(t0).Round(time.Second), Table(rs))
	}
	if out := os.Getenv("FAULTS_OUT"); out != "" && len(rs) > 0 {
		if err := WriteFile(out, rs, time.Since(t0)); err != nil {
			fmt.Fprintln(os.Stderr, "faults: write", out+":", err)
			code = 1
		} else {
			fmt.Println("faults: wrote", out)
		}
	}
	os.Exit(code)
}
