// Package examples holds runnable programs that show how other services
// use the spawner and the protocol: demo (what `make demo` runs),
// quickstart (create a worker, send a task, wait for its output), consumer
// (tail the lifecycle, progress and output streams) and node-consumer (the
// same streams read from Node.js and validated against the JSON Schemas).
package examples
