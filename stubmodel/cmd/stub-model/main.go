// Command stub-model serves the stub Anthropic Messages API and OpenAI's
// Responses and Chat Completions APIs on loopback, following a script
// file, for the demo and for trying the agents by hand:
//
//	stub-model -addr 127.0.0.1:8089 -script script.json
//
// Without -script every request is answered with a final text that ends in
// a complete stop output. It logs every request to stderr as one JSON line.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentvisor/agentvisor/stubmodel"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8089", "loopback address to listen on")
	scriptPath := flag.String("script", "", "JSON script of answers (see package stubmodel)")
	flag.Parse()

	var script stubmodel.Script
	if *scriptPath != "" {
		b, err := os.ReadFile(*scriptPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stub-model:", err)
			os.Exit(2)
		}
		if script, err = stubmodel.LoadScript(b); err != nil {
			fmt.Fprintln(os.Stderr, "stub-model:", err)
			os.Exit(2)
		}
	}
	srv, err := stubmodel.StartOn(*addr, script)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stub-model:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "stub-model: listening on %s\n", srv.URL)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	_ = srv.Close()
}
