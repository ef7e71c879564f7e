-- Runs on the nginx worker's event loop itself: the wait is
-- lock:acquire_nb, whose sleeps are ngx.sleep and whose tries are instant
-- on SQLite and run in a thread of the pool (ngx.run_worker_thread) on the
-- server backends, so a waiting request yields. Each function answers one
-- request of nb_driver.py; a = the request's arguments.
local leaselock = require "leaselock"

local M = {}
local clients = {}
local started = {} -- key -> the take requests that began on this worker

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

-- Takes a.key with acquire_nb{timeout = a.timeout, pool = a.pool}, holds it
-- for a.hold seconds (ngx.sleep), releases it. Says
-- "ok <fence> <started> <acquired> <released>" or "fail <code> <started> <ended> <msg>".
function M.take(a)
  local lock = client_for(a.uri):lock(a.key, { ttl = 30 })
  local t0 = now()
  started[a.key] = (started[a.key] or 0) + 1
  local lease, msg, code = lock:acquire_nb { timeout = tonumber(a.timeout), pool = a.pool }
  if not lease then
    ngx.say(("fail %s %.3f %.3f %s"):format(code, t0, now(), msg))
    return
  end
  local acquired = now()
  local hold = tonumber(a.hold)
  if hold > 0 then ngx.sleep(hold) end
  local fence = lease.fence
  local released = now()
  assert(lease:release())
  ngx.say(("ok %d %.3f %.3f %.3f"):format(fence, t0, acquired, released))
end

-- The request ends while its first try runs in a pool thread: nginx
-- drops that thread's results, so the lease it took is never adopted.
function M.abort(a)
  local lock = client_for(a.uri):lock(a.key, { ttl = 30 })
  ngx.thread.spawn(function() lock:acquire_nb { timeout = 5 } end)
  ngx.say("left")
  ngx.exit(ngx.HTTP_OK)
end

-- "held <owner>" or "free", as the database has a.key now.
function M.info(a)
  local rec, msg, code = client_for(a.uri):info(a.key)
  if not rec and msg then
    ngx.say("fail ", code, " ", msg)
  elseif rec and rec.owner and rec.expires_in > 0 then
    ngx.say("held ", rec.owner)
  else
    ngx.say("free")
  end
end

-- Closes the worker's client of a.uri (the next request makes a new one).
function M.close(a)
  local client = clients[a.uri]
  clients[a.uri] = nil
  if client then
    local ok, msg, code = client:close()
    if not ok then
      ngx.say("fail ", code, " ", msg)
      return
    end
  end
  ngx.say("closed")
end

-- "<requests> <started>": the client's count of statements sent (each
-- try of a wait, in a pool thread or not, goes through the worker's one
-- client; while the holder holds, only the waiters' tries send any) and
-- the count of take requests for a.key that have begun.
function M.stats(a)
  ngx.say(client_for(a.uri):stats().requests, " ", started[a.key] or 0)
end

-- Misuse under nginx, one error message per line.
function M.bad(a)
  local lock = client_for(a.uri):lock(a.key, { ttl = 30 })
  local function err(...)
    local ok, e = pcall(...)
    return ok and "no error" or tostring(e)
  end
  ngx.say(err(lock.acquire_nb, lock, { pool = "ll_no_such_pool" }))
  ngx.say(err(lock.acquire_nb, lock, { pool = 5 }))
  ngx.say(err(lock.acquire_nb, lock, { timeout = -1 }))
  -- The pool function checks its arguments too.
  local ok, e = ngx.run_worker_thread("default", "leaselock.pool", "_pool_try", "x")
  ngx.say(tostring(ok), " ", tostring(e))
  ok, e = ngx.run_worker_thread("default", "leaselock.pool", "_pool_try", 0)
  ngx.say(tostring(ok), " ", tostring(e))
  -- A wait that is not registered: a busy try, GONE.
  local _, code
  ok, e, _, code = ngx.run_worker_thread("default", "leaselock.pool", "_pool_try", 2 ^ 40)
  ngx.say(tostring(ok), " ", tostring(e), " ", tostring(code))
end

return M
