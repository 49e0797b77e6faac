"""The writer's Redis lease: at most one active writer at a time.

``SET key token NX PX ttl`` takes it; renew and release are compare-and-set scripts so that only
the holder's token can extend or drop it (a writer that stalled past its TTL and lost the lease to
another cannot release the newcomer's lease). A heartbeat thread renews it while the holder
works, so a long batch keeps it, and a SIGKILLed holder loses it ``ttl`` after its last renewal.

With ``wanted_key``, a candidate that finds the lease taken leaves a mark there ("there is work
for the holder"), in the same script that tried to take it, and the holder's release reports the
mark in the same script that drops the lease. Each step is atomic, so a mark is either seen by the
releasing holder or was left after the release, when the lease was free (and the candidate took
it): a nudge that arrives while the holder finishes never goes unanswered.
"""

from __future__ import annotations

import logging
import threading
import uuid

import redis

logger = logging.getLogger(__name__)

_ACQUIRE = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if KEYS[2] then
  redis.call('set', KEYS[2], '1', 'PX', ARGV[2])
end
return 0
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  local wanted = 0
  if KEYS[2] then
    wanted = redis.call('del', KEYS[2])
  end
  return {1, wanted}
end
return {0, 0}
"""


class Lease:
    def __init__(
        self, client: redis.Redis, *, key: str, ttl_ms: int, owner: str, wanted_key: str | None = None
    ):
        self.client, self.key, self.ttl_ms = client, key, ttl_ms
        self._keys = [key] if wanted_key is None else [key, wanted_key]
        # Set by release(): a candidate found the lease taken while we held it.
        self.wanted = False
        # The owner (host:pid:...) goes first so that "who holds it" is readable by operators.
        self.token = f"{owner}:{uuid.uuid4().hex[:8]}"
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self) -> bool:
        if not self.client.eval(_ACQUIRE, len(self._keys), *self._keys, self.token, self.ttl_ms):
            return False
        self.lost.clear()
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name="writer-lease", daemon=True)
        self._beat.start()
        return True

    def renew(self) -> bool:
        ok = bool(self.client.eval(_RENEW, 1, self.key, self.token, self.ttl_ms))
        if not ok:
            self.lost.set()
        return ok

    def release(self) -> bool:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
            self._beat = None
        try:
            released, wanted = self.client.eval(_RELEASE, len(self._keys), *self._keys, self.token)
            self.wanted = bool(wanted)
            return bool(released)
        except redis.RedisError:
            logger.warning("writer lease release failed; it expires in %s ms", self.ttl_ms, exc_info=True)
            return False

    @property
    def held(self) -> bool:
        return not self.lost.is_set()

    def _heartbeat(self) -> None:
        # Renew at a third of the TTL: two renewals may fail (a Redis blip) before it lapses.
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                if not self.renew():
                    logger.warning("writer lease %s lost to another holder", self.token)
                    return
            except redis.RedisError:
                logger.warning("writer lease renewal failed", exc_info=True)
