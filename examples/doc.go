// Package examples holds runnable programs that show how other services
// use the spawner and the protocol: demo (what `make demo` runs),
// quickstart (create a worker, send a task, wait for its output), consumer
// (tail the lifecycle, progress and output streams), node-consumer (the
// same streams read from Node.js and validated against the JSON Schemas)
// and typescript (the quickstart with the TypeScript client,
// clients/typescript, whose tests typescript_test.go runs against a live
// runtime).
package examples
