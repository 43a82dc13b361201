# Redis in the cluster (deploy/kubernetes/in-cluster-redis): Debian's
# redis-server, run as uid 999 by the StatefulSet.
ARG BASE_IMAGE=agentvisor/os-base:bookworm
FROM ${BASE_IMAGE}
RUN groupadd --system --gid 999 redis \
 && useradd --system --uid 999 --gid 999 --no-create-home --home-dir /data redis \
 && apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
LABEL io.agentvisor.image=redis
USER 999:999
ENTRYPOINT ["/usr/bin/redis-server"]
