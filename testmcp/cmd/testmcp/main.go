// Command testmcp is the tests' MCP server: on stdin and stdout by
// default, or over streamable HTTP with -http ADDR (it prints its URL).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/agentvisor/agentvisor/testmcp"
)

func main() {
	addr := flag.String("http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:0) instead of stdio")
	flag.Parse()
	if *addr == "" {
		if err := testmcp.ServeStdio(context.Background()); err != nil {
			log.Fatalf("testmcp: %v", err)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("testmcp: %v", err)
	}
	fmt.Fprintf(os.Stdout, "http://%s/mcp\n", ln.Addr())
	log.Fatal(http.Serve(ln, testmcp.HTTPHandler()))
}
