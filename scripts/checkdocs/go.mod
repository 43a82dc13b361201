module github.com/agentvisor/agentvisor/scripts/checkdocs

go 1.26.0
