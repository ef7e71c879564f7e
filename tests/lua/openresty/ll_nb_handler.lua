-- Runs on the nginx worker's event loop itself (no worker thread): the
-- wait is lock:acquire_nb, whose tries are one-try acquires (instant on
-- SQLite) and whose sleeps are ngx.sleep, so a waiting request yields.
local leaselock = require "leaselock"

local M = {}
local clients = {}

local function now()
  ngx.update_time()
  return ngx.now()
end

local function client_for(uri)
  local client = clients[uri]
  if not client then
    client = assert(leaselock.connect(uri, { label = "openresty-nb" }))
    clients[uri] = client
  end
  return client
end

-- Takes key with acquire_nb{timeout = timeout}, holds it for hold
-- seconds (ngx.sleep), releases it. Says
-- "ok <fence> <started> <acquired> <released>" or "fail <code> <started> <ended> <msg>".
function M.take(uri, key, timeout, hold)
  local lock = client_for(uri):lock(key, { ttl = 30 })
  local started = now()
  local lease, msg, code = lock:acquire_nb { timeout = timeout }
  if not lease then
    ngx.say(("fail %s %.3f %.3f %s"):format(code, started, now(), msg))
    return
  end
  local acquired = now()
  ngx.sleep(hold)
  local fence = lease.fence
  local released = now()
  assert(lease:release())
  ngx.say(("ok %d %.3f %.3f %.3f"):format(fence, started, acquired, released))
end

return M
