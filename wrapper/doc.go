// Package wrapper is the module of the worker-wrapper, PID 1 of every worker
// container. It runs one agent CLI per worker: Claude Code, Factory Droid,
// OpenAI Codex, OpenCode, Qwen Code, or any agent that speaks ACP.
// cmd/worker-wrapper is the binary; worker its pipeline (read a task,
// route it, run the agent, publish what happens); agent the agent CLIs'
// adapters, their processes and their output; reaper the reaping of
// orphans; seal the wrapper out of the agent's reach; apiproxy and egress
// the agent's only ways to the model API and the network; logsink the
// log that never blocks; internal/rdb every Redis call.
package wrapper
