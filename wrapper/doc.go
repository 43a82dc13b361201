// Package wrapper is the module of the worker-wrapper, PID 1 of every worker
// container: cmd/worker-wrapper is the binary, worker its pipeline (read a
// task, run the agent, publish what happens), agent the agent CLIs'
// adapters, their processes and their output, reaper the reaping of
// orphans, internal/rdb every Redis call.
package wrapper
