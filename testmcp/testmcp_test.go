package testmcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A client of the SDK lists the one tool and calls it; the answer carries
// the tag of the server's environment.
func TestEchoTool(t *testing.T) {
	t.Setenv(TagEnv, "t1")
	ctx := context.Background()
	serverT, clientT := mcp.NewInMemoryTransports()
	if _, err := NewServer().Connect(ctx, serverT, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != ToolName {
		t.Fatalf("tools %+v, %v", tools, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("call: %+v, %v", res, err)
	}
	if txt, ok := res.Content[0].(*mcp.TextContent); !ok || txt.Text != Answer("hi", "t1") {
		t.Fatalf("answer %+v", res.Content[0])
	}
}

// Over streamable HTTP, the tag comes from the request's header.
func TestEchoOverHTTPTakesTheHeader(t *testing.T) {
	t.Setenv(TagEnv, "env")
	srv := httptest.NewServer(HTTPHandler())
	defer srv.Close()
	ctx := context.Background()
	tr := &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: headerRT{TagHeader, "hdr"}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"text": "hi"}})
	if err != nil || len(res.Content) != 1 {
		t.Fatalf("call: %+v, %v", res, err)
	}
	if txt, ok := res.Content[0].(*mcp.TextContent); !ok || txt.Text != Answer("hi", "hdr") {
		t.Fatalf("answer %+v", res.Content[0])
	}
}

// headerRT adds one header to every request.
type headerRT struct{ name, value string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}
