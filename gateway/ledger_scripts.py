"""gateway.ledger's Redis scripts: the process's alive key and notes renewed (``PROGRESS``), and the notes of the
requests started in one turn of the event loop (``NOTE``)."""

# KEYS: 1 the process's notes, 2 its alive key, 3 the set of noting processes. ARGV: 1 the alive key's TTL (s),
# 2 the process, then request id, note pairs. Returns 1 when the process was not in the set: Redis lost it.
PROGRESS = """
local lost = redis.call('SADD', KEYS[3], ARGV[2])
redis.call('SET', KEYS[2], '1', 'EX', ARGV[1])
for i = 3, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return lost
"""

# The notes of the requests started in one turn of the event loop (or while the previous call was on its way),
# with their deployments' activity.
# KEYS: 1 the process's notes, then each deployment's last-request key and in-flight set (console.deployments.
#       activity), a pair per deployment. ARGV: 1 now (Unix s), 2 activity.KEPT, 3 activity.LAPSE, 4 the notes'
#       count N, then N triples: request id, its note (JSON), its deployment's pair (1: KEYS 2-3, 2: KEYS 4-5, ...).
# One script, not a pipeline of HSET, SET, ZADD and EXPIRE: a pipeline cost twice the client CPU of the HSET alone.
NOTE = """
local now, kept, lapse, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local till = tonumber(now) + lapse
for i = 0, n - 1 do
  local rid, pair = ARGV[5 + 3 * i], 2 * tonumber(ARGV[7 + 3 * i])
  redis.call('HSET', KEYS[1], rid, ARGV[6 + 3 * i])
  redis.call('SET', KEYS[pair], now, 'EX', kept)
  redis.call('ZADD', KEYS[pair + 1], till, rid)
  redis.call('EXPIRE', KEYS[pair + 1], lapse)
end
"""
