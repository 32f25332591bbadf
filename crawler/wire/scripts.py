"""The fleet's server-side Lua scripts: each runs atomically inside Redis.

Keys and fields are those of ``crawler.wire.protocol.Keys``.
"""

REGISTER = """
-- KEYS: fleet, idle, gen, stop, stream
-- ARGV: workers, geometry, protocol, created, id, group, epoch
-- The epoch is set once, when the fleet's hash is created: a Redis that lost the
-- fleet's data gets a new one, which is how every worker learns of the loss.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'workers', ARGV[1], 'geometry', ARGV[2],
             'protocol', ARGV[3], 'created', ARGV[4])
end
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[7])
local got = redis.call('HMGET', KEYS[1], 'workers', 'geometry', 'protocol', 'epoch')
local gen = 0
if got[1] == ARGV[1] and got[2] == ARGV[2] and got[3] == ARGV[3] then
  redis.call('HSET', KEYS[2], ARGV[5], '0')
  gen = redis.call('HINCRBY', KEYS[3], ARGV[5], 1)
  -- from id 0, not $: links forwarded before this worker first joined are its too
  redis.pcall('XGROUP', 'CREATE', KEYS[5], ARGV[6], '0', 'MKSTREAM')
end
return {got[1], got[2], got[3], redis.call('GET', KEYS[4]) or '0', gen, got[4]}
"""

ACK = """
-- KEYS: stream, counters, idle, gen   ARGV: group, worker id, entry ids...
local acked = 0
for i = 3, #ARGV do
  local entry = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if redis.call('XACK', KEYS[1], ARGV[1], ARGV[i]) == 1 then
    if entry[1] then
      local f = entry[1][2]
      for j = 1, #f, 2 do
        if f[j] == 'n' then acked = acked + tonumber(f[j + 1]) end
      end
    end
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
if acked > 0 then redis.call('HINCRBY', KEYS[2], 'acked', acked) end
redis.call('HSET', KEYS[3], ARGV[2], '0')
return {acked, redis.call('HINCRBY', KEYS[4], ARGV[2], 1)}
"""

SET_IDLE = """
-- KEYS: idle, gen, fleet, counters
-- ARGV: worker id, generation the caller saw, its epoch, its sent field, links it sent
-- -1: the fleet's epoch is not the caller's, or Redis counts fewer links sent by it
-- than it knows it sent (Redis lost data since it last looked): it must re-send what
-- it forwarded before it may count as idle.
if redis.call('HGET', KEYS[3], 'epoch') ~= ARGV[3] then return -1 end
if tonumber(redis.call('HGET', KEYS[4], ARGV[4]) or '0') < tonumber(ARGV[5]) then
  return -1
end
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], '1')
  return 1
end
return 0
"""

STATUS = """
-- KEYS: fleet, idle, counters, streams...   ARGV: workers
local w = tonumber(ARGV[1])
local idle = 0
for i = 0, w - 1 do
  if redis.call('HGET', KEYS[2], tostring(i)) == '1' then idle = idle + 1 end
end
local backlog = 0
for j = 4, #KEYS do backlog = backlog + redis.call('XLEN', KEYS[j]) end
local c = redis.call('HMGET', KEYS[3], 'forwarded', 'acked')
return {redis.call('HGET', KEYS[1], 'workers') or '', idle, backlog,
        tonumber(c[1] or '0'), tonumber(c[2] or '0')}
"""

