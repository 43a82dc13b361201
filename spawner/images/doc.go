// Package images builds and collects worker images. A worker's image is
// named by the hash of its recipe (the agent, its version, the
// capabilities, the base image): Builder.EnsureImage builds it once per
// engine, concurrent callers sharing the build, and records each use in
// Redis; GC removes the images no worker used for a retention. It is the
// one part of the spawner beside the Docker engine (engine/docker) that
// speaks Docker.
package images
