# The worker-gateway as a cluster workload (a DaemonSet of
# deploy/kubernetes/runtime): the static worker-gateway and CA
# certificates (it speaks HTTPS to the model API and credentialed hosts).
ARG BASE_IMAGE=agentvisor/os-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
COPY worker-gateway /usr/local/bin/worker-gateway
LABEL io.agentvisor.image=worker-gateway
ENTRYPOINT ["/usr/local/bin/worker-gateway"]
