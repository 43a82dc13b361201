package images

import (
	"strings"
	"testing"
)

// A program's stderr reaches the build stream a few bytes at a time, each
// chunk in colour codes: the log's tail must still read as the program
// wrote it.
func TestBuildLogJoinsChunksAndDropsColour(t *testing.T) {
	var in strings.Builder
	in.WriteString(`{"stream":"Step 3/4 : RUN curl\n"}` + "\n")
	for _, c := range []string{"cu", "r", "l: (7) Failed to ", "connect to 127.0.0.1 port 9 after 0 ms: Couldn't connect to server", "\n"} {
		in.WriteString(`{"stream":"\u001b[91m` + strings.ReplaceAll(c, "\n", `\n`) + `\u001b[0m"}` + "\n")
	}
	for i := 0; i < 60; i++ { // more fragments than the tail keeps lines
		in.WriteString(`{"stream":"\u001b[91m.\u001b[0m"}` + "\n")
	}
	in.WriteString(`{"error":"The command returned a non-zero code: 7"}` + "\n")
	tail, _, err := readBuildOutput(strings.NewReader(in.String()), nil)
	if err == nil {
		t.Fatal("no error")
	}
	want := "curl: (7) Failed to connect to 127.0.0.1 port 9 after 0 ms: Couldn't connect to server"
	if !strings.Contains(tail, want) || strings.Contains(tail, "\x1b") {
		t.Fatalf("tail %q, want it to hold %q without escapes", tail, want)
	}
	if !strings.HasSuffix(tail, "\n"+strings.Repeat(".", 60)) {
		t.Fatalf("tail %q: the unfinished last line is missing", tail)
	}
}

func TestBuildLogKeepsTheLastLines(t *testing.T) {
	var b buildLog
	for i := 0; i < 100; i++ {
		b.write("line\n")
	}
	b.write("last\n")
	got := strings.Split(b.String(), "\n")
	if len(got) != buildLogLines || got[len(got)-1] != "last" {
		t.Fatalf("%d lines, last %q", len(got), got[len(got)-1])
	}
}
