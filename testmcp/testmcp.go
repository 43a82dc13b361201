// Package testmcp is a small MCP server for the runtime's tests, built on
// the official MCP Go SDK: one tool, echo, whose answer names the server
// and carries a tag from its environment, so that a test can tell that the
// agent ran the tool of the server the worker's spec declared, with the
// environment the spec gave it. cmd/testmcp serves it on stdio or HTTP.
package testmcp

import (
	"context"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ToolName is the one tool's name. Claude Code exposes it as
// mcp__<server>__echo, where <server> is the name the spec gives.
const ToolName = "echo"

// TagEnv is the variable whose value the tool's answer carries; over
// HTTP, the header TagHeader takes its place when a request has it, so
// that a test can see the headers a client was told to send.
const (
	TagEnv    = "TESTMCP_TAG"
	TagHeader = "X-Testmcp-Tag"
)

// EchoArgs is the tool's input.
type EchoArgs struct {
	Text string `json:"text" jsonschema:"the text to echo back"`
}

// Answer is the text the tool returns for text under tag.
func Answer(text, tag string) string { return "testmcp echo: " + text + " (tag " + tag + ")" }

// NewServer returns the server with its tool.
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "agentvisor-testmcp", Version: "v1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: ToolName, Description: "Echo a text back, for tests."},
		func(_ context.Context, req *mcp.CallToolRequest, in EchoArgs) (*mcp.CallToolResult, any, error) {
			tag := os.Getenv(TagEnv)
			if req.Extra != nil && req.Extra.Header.Get(TagHeader) != "" {
				tag = req.Extra.Header.Get(TagHeader)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: Answer(in.Text, tag)}}}, nil, nil
		})
	return s
}

// ServeStdio serves one client on stdin and stdout until it disconnects.
func ServeStdio(ctx context.Context) error {
	return NewServer().Run(ctx, &mcp.StdioTransport{})
}

// HTTPHandler serves the streamable HTTP transport (one server for every
// session).
func HTTPHandler() http.Handler {
	s := NewServer()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}
