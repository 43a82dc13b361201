# The worker-manager as a cluster workload (deploy/kubernetes/runtime): the
# static worker-manager, CA certificates, and containerd's ctr, with which
# it imports the worker images it builds into a node's containerd
# (K8S_LOAD_IMAGES) on a cluster without a registry.
ARG BASE_IMAGE=agentvisor/os-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates containerd \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
COPY worker-manager /usr/local/bin/worker-manager
LABEL io.agentvisor.image=worker-manager
ENTRYPOINT ["/usr/local/bin/worker-manager"]
