"""Redis URLs as every component of the runtime takes them (PROTOCOL.md,
"Redis URL"), and the clients redis-py makes of them:

    redis://[[user]:password@]host[:port][/db]
    rediss://...                                    (TLS)
    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db][?sentinel_username=u&sentinel_password=p]
    rediss+sentinel://...                           (TLS to the sentinels and the servers)
"""

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

from .errors import AgentvisorError

DEFAULT_REDIS_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
_SCHEMES = {"redis": (False, False), "rediss": (False, True), "redis+sentinel": (True, False), "rediss+sentinel": (True, True)}


class BadRedisURL(AgentvisorError, ValueError):
    """A URL the runtime would refuse; the message never quotes the URL,
    which may hold a password."""

    def __init__(self, why):
        super().__init__("INVALID_COMMAND", "bad redis URL: " + why, False)


@dataclass
class RedisURL:
    sentinel: bool = False
    tls: bool = False
    addrs: list = field(default_factory=list)  # (host, port)
    master: str = ""
    db: int = 0
    username: str = ""
    password: str = ""
    sentinel_username: str = ""
    sentinel_password: str = ""


def parse(raw):
    """Parses a Redis URL of one of the four schemes."""
    u = RedisURL()
    scheme, sep, rest = raw.partition("://")
    if not sep:
        raise BadRedisURL("want redis://, rediss://, redis+sentinel:// or rediss+sentinel://")
    if scheme.lower() not in _SCHEMES:
        raise BadRedisURL("an unknown scheme (want redis, rediss, redis+sentinel or rediss+sentinel)")
    u.sentinel, u.tls = _SCHEMES[scheme.lower()]
    rest, _, query = rest.partition("?")
    if "#" in rest or "#" in query:
        raise BadRedisURL("a fragment (#) has no meaning")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        info, _, authority = authority.rpartition("@")
        user, _, password = info.partition(":")
        u.username, u.password = unquote(user), unquote(password)
    default_port = DEFAULT_SENTINEL_PORT if u.sentinel else DEFAULT_REDIS_PORT
    u.addrs = [_host_port(h, default_port, u.sentinel) for h in authority.split(",")]
    if not u.sentinel and len(u.addrs) > 1:
        raise BadRedisURL("a redis:// URL names one server; list several sentinels with redis+sentinel://")
    segs = [s for s in path.strip("/").split("/")] if path.strip("/") else []
    if u.sentinel:
        if not segs:
            raise BadRedisURL("a sentinel URL needs the master's name as its path (/mymaster or /mymaster/0)")
        u.master = unquote(segs.pop(0))
        if not u.master or re.search(r"\s", u.master):
            raise BadRedisURL("the master's name is empty or malformed")
    if len(segs) > 1:
        raise BadRedisURL("too many path segments (want /db, or /master/db for a sentinel URL)")
    if segs:
        if not segs[0].isdigit():
            raise BadRedisURL("the database must be a number of 0 or more")
        u.db = int(segs[0])
    for key, value in parse_qsl(query, keep_blank_values=True):
        if not u.sentinel or key not in ("sentinel_username", "sentinel_password"):
            raise BadRedisURL(f"the query parameter {key!r} has no meaning here")
        setattr(u, key, value)
    return u


def _host_port(h, port, sentinel):
    if not h:
        if sentinel:
            raise BadRedisURL("an empty sentinel address")
        return ("localhost", port)
    host, p = h, str(port)
    if h.startswith("["):
        end = h.find("]")
        if end < 0:
            raise BadRedisURL("an IPv6 address without its closing bracket")
        host, tail = h[1:end], h[end + 1 :]
        if tail:
            if not tail.startswith(":"):
                raise BadRedisURL("junk after an IPv6 address")
            p = tail[1:]
    elif ":" in h:
        host, _, p = h.rpartition(":")
    if not p.isdigit() or not 1 <= int(p) <= 65535:
        raise BadRedisURL("a port must be a number from 1 to 65535")
    if not host or re.search(r"[\s/\\?#@\[\]]", host) or (":" in host and not h.startswith("[")):
        raise BadRedisURL("a host name is empty or malformed")
    return (host, int(p))


@dataclass
class WaitPolicy:
    """WAIT after the writes that matter (a task, a command): replicas 1
    for a sentinel URL, 0 (no WAIT) for a plain one, unless
    REDIS_WAIT_REPLICAS says otherwise; timeout_ms REDIS_WAIT_TIMEOUT."""

    replicas: int = 0
    timeout_ms: int = 500

    @classmethod
    def from_env(cls, u, environ=None):
        env = os.environ if environ is None else environ
        p = cls(replicas=1 if u.sentinel else 0)
        r = env.get("REDIS_WAIT_REPLICAS", "").strip()
        if r:
            if not r.isdigit() or int(r) > 100:
                raise BadRedisURL("REDIS_WAIT_REPLICAS: want a number of replicas from 0 to 100")
            p.replicas = int(r)
        t = env.get("REDIS_WAIT_TIMEOUT", "").strip()
        if t:
            p.timeout_ms = _millis(t)
        return p


def _millis(t):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", t)
    if not m:
        raise BadRedisURL("REDIS_WAIT_TIMEOUT: want a duration above 0 and at most 1m (or milliseconds)")
    n = float(m.group(1)) * {"ms": 1, None: 1, "s": 1000, "m": 60000}[m.group(2)]
    if not 0 < n <= 60000:
        raise BadRedisURL("REDIS_WAIT_TIMEOUT: want a duration above 0 and at most 1m (or milliseconds)")
    return int(n)


def _kwargs(u, timeout, retry):
    # A call that loses its connection (a primary demoted by a failover:
    # redis-py then asks the sentinels again) is made again, a few times.
    from redis.exceptions import ConnectionError as LostConnection

    kw = {"db": u.db, "socket_timeout": timeout, "socket_connect_timeout": min(timeout, 10.0), "decode_responses": True,
          "retry": retry, "retry_on_error": [LostConnection]}
    if u.username:
        kw["username"] = u.username
    if u.password:
        kw["password"] = u.password
    if u.tls:
        kw["ssl"] = True
    return kw


def _sentinel_kwargs(u, timeout):
    kw = {"socket_timeout": timeout, "socket_connect_timeout": min(timeout, 10.0)}
    if u.sentinel_username:
        kw["username"] = u.sentinel_username
    if u.sentinel_password:
        kw["password"] = u.sentinel_password
    if u.tls:
        kw["ssl"] = True
    return kw


# How often a call that lost its connection is made again.
RETRIES = 6


def connect(u, timeout=30.0):
    """A redis-py client for u: a connection pool to the one server, or a
    sentinel-managed one that follows the primary of u.master."""
    import redis
    import redis.sentinel
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    retry = Retry(ExponentialBackoff(cap=2.0, base=0.1), RETRIES)

    if not u.sentinel:
        host, port = u.addrs[0]
        return redis.Redis(host=host, port=port, **_kwargs(u, timeout, retry))
    s = redis.sentinel.Sentinel(u.addrs, sentinel_kwargs=_sentinel_kwargs(u, timeout))
    return s.master_for(u.master, **_kwargs(u, timeout, retry))


def connect_async(u, timeout=30.0):
    """The asyncio form of connect."""
    import redis.asyncio
    import redis.asyncio.sentinel
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff

    retry = Retry(ExponentialBackoff(cap=2.0, base=0.1), RETRIES)

    if not u.sentinel:
        host, port = u.addrs[0]
        return redis.asyncio.Redis(host=host, port=port, **_kwargs(u, timeout, retry))
    s = redis.asyncio.sentinel.Sentinel(u.addrs, sentinel_kwargs=_sentinel_kwargs(u, timeout))
    return s.master_for(u.master, **_kwargs(u, timeout, retry))
