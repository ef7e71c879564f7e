-- lock:acquire_nb([opts]) -> lease | nil, msg, code: the waiting acquire
-- for OpenResty.
--
-- It is one waiter of the core (leaselock_wait_new / _try / _destroy),
-- like a blocking acquire: one owner for all its tries, each busy try
-- claims the key's reservation (its next owner), and with the lock's
-- `fair` it keeps its place in the key's queue. Between tries it sleeps
-- with ngx.sleep (or opts.sleep), so a waiting request yields to the
-- worker's event loop. A try on SQLite (or outside nginx) is made in the
-- worker (one short local statement, a moment at most on the file's
-- lock); under OpenResty a try on a server backend runs in a thread of
-- the pool opts.pool (ngx.run_worker_thread; lua/pool.c), so its round
-- trip does not block the event loop either. A C function cannot yield
-- across ngx.sleep or ngx.run_worker_thread, so the loop is here.
--
-- The knobs are lua-resty-lock's: timeout (seconds slept in all, default
-- 5; 0 tries once; math.huge waits forever), step (the first sleep,
-- default 0.001), ratio (each sleep is the last times ratio, default 2),
-- max_step (the longest sleep, default 0.5); and pool, the nginx thread
-- pool of the tries on a server backend (default "default"). A sleep is
-- also never longer than the core asks (a waiter next for the key polls
-- often enough to keep its claim). A pool with no room for a try now (its
-- queue full, or no free Lua VM) counts as a busy try.
--
-- Embedded in the module at build time (chunk "=leaselock.acquire_nb")
-- and called once by luaopen_leaselock with the C halves of a try
-- (acquire_nb.c):
--   begin(lock, nginx, one_try) -> wait id, here | nothing (this
--     coroutine holds the lock: try_here once)
--   try_wait(lock, wait id) -> lease | nil, msg, code[, sleep]: a try here
--   give_up(wait id, here) -> nothing: the wait ends without the lock
--   try_here(lock) -> lease | nil, msg, code: a one-try acquire here
--   adopt(lock, parked_id) -> lease | nil, "busy", "BUSY"
-- They are called from `try` below, two Lua frames under acquire_nb's
-- caller: their errors point three levels up. Returns the method.
local begin, try_wait, give_up, try_here, adopt = ...
-- ngx is read when called, not captured: a test outside nginx may set it
local type, error, pairs, tostring = type, error, pairs, tostring
local min, max, huge, fmt = math.min, math.max, math.huge, string.format
local known = { timeout = true, step = true, ratio = true, max_step = true, sleep = true,
                pool = true }
local full = { ['no available Lua vm'] = true, ['ngx_thread_task_post failed'] = true }
local function bad(msg, level)
  error("bad argument #1 to 'acquire_nb' (" .. msg .. ")", level or 3)
end
local function num(opts, name, default, lo, lo_ok, allow_huge)
  local v = opts[name]
  if v == nil then return default end
  if type(v) ~= 'number' then bad(fmt('%s: number expected, got %s', name, type(v)), 4) end
  if v ~= v or (v == huge and not allow_huge) or v == -huge
     or v < lo or (v == lo and not lo_ok) then
    bad(fmt('%s must be a finite number %s %s, got %s', name, lo_ok and '>=' or '>', lo,
            tostring(v)), 4)
  end
  return v
end
-- A parked lease nobody adopts waits for a pool thread to release it:
-- the next try's, else this timer's, armed before each try (an ended
-- request's never comes back) while leases stay parked; it stops when
-- the worker exits (the client's collection releases them then).
local reaping = false
local function reap(premature, pool)
  if not premature then
    local ok, left = ngx.run_worker_thread(pool, 'leaselock.pool', '_pool_reap')
    if (ok and left > 0 or not ok and full[left]) and ngx.timer.at(5, reap, pool) then
      return
    end
  end
  reaping = false
end
local function arm_reaper(pool)
  if not reaping and type(ngx.timer) == 'table' then
    reaping = ngx.timer.at(6, reap, pool) and true or false
  end
end
-- One try of the wait wid: lease | nil, msg, code[, sleep]; code 'FULL'
-- when the pool had no room for it, 'GONE' when the wait was reaped. No
-- tail calls: errors count their levels from here.
local function try(self, pool, wid)
  if not pool then
    local lease, msg, code, pause = try_wait(self, wid)
    return lease, msg, code, pause
  end
  local run = ngx.run_worker_thread
  if type(run) ~= 'function' then
    error('acquire_nb: no ngx.run_worker_thread (lua-nginx-module >= 0.10.21, nginx with '
          .. 'threads)', 3)
  end
  arm_reaper(pool)
  local ok, id, msg, code, pause = run(pool, 'leaselock.pool', '_pool_try', wid)
  if not ok then
    if full[id] then return nil, fmt('thread pool %q has no room (%s)', pool, id), 'FULL' end
    if type(id) == 'string' and id:find('not found', 1, true) then
      bad(fmt('pool: no thread pool %q (nginx.conf, main context: thread_pool %s threads=4;)',
              pool, pool), 4)
    end
    error(fmt('acquire_nb: thread pool %q: %s', pool, tostring(id)), 3)
  end
  if id == nil then
    if code == 'INVALID' then error('acquire_nb: ' .. tostring(msg), 3) end
    return nil, msg, code, pause
  end
  local lease, m, c = adopt(self, id)
  return lease, m, c
end
local function waits(lease, code)
  return not lease and (code == 'BUSY' or code == 'FULL' or code == 'GONE')
end
local function timed_out(self, waited, msg, code)
  return nil, fmt('timed out after %.3f s waiting for %q (%s)', waited, self.key,
                  code == 'FULL' and msg or 'held by another owner'), 'TIMEOUT'
end
-- Under nginx the wait is bounded by the clock too: a try in the pool
-- takes a round trip, more when the pool is busy.
local function clock()
  if type(ngx) == 'table' and type(ngx.now) == 'function' then
    ngx.update_time()
    return ngx.now()
  end
end
return function(self, opts)
  if opts == nil then opts = {} end
  if type(opts) ~= 'table' then bad('table expected, got ' .. type(opts)) end
  for k in pairs(opts) do
    if not known[k] then bad('unknown option ' .. fmt('%q', tostring(k))) end
  end
  local timeout = num(opts, 'timeout', 5, 0, true, true)
  if timeout ~= huge and timeout > 30 * 86400 then
    bad(fmt('timeout must be at most 30 days or math.huge, got %s', tostring(timeout)))
  end
  local step = num(opts, 'step', 0.001, 0, false)
  local ratio = num(opts, 'ratio', 2, 1, true)
  local max_step = num(opts, 'max_step', 0.5, 0, false)
  local sleep = opts.sleep
  if sleep == nil then sleep = type(ngx) == 'table' and ngx.sleep or nil end
  if sleep == nil then
    bad('sleep: no ngx.sleep outside OpenResty; pass a sleep function')
  elseif type(sleep) ~= 'function' then
    bad('sleep: function expected, got ' .. type(sleep))
  end
  local pool = opts.pool
  if pool == nil then pool = 'default'
  elseif type(pool) ~= 'string' then bad('pool: string expected, got ' .. type(pool)) end
  if type(ngx) ~= 'table' then pool = nil end
  local started = clock()
  local wid, here = begin(self, pool ~= nil, timeout == 0)
  if not wid then
    local lease, msg, code = try_here(self)
    return lease, msg, code
  end
  if here then pool = nil end
  local lease, msg, code, pause = try(self, pool, wid)
  if not waits(lease, code) then return lease, msg, code end
  if timeout == 0 then
    if code ~= 'BUSY' then give_up(wid, here) end -- BUSY ended the one try's wait
    return nil, msg, code == 'BUSY' and code or 'TIMEOUT'
  end
  local slept, waited = 0, started and clock() - started or 0
  step = min(step, max_step)
  while waited < timeout do
    -- ngx.sleep counts whole milliseconds: less would be a sleep(0), a
    -- busy loop through the last millisecond of the wait.
    local s = max(min(step, pause or step, timeout - waited), 0.001)
    if code == 'GONE' then wid = begin(self, pool ~= nil, false) end
    sleep(s)
    slept = slept + s
    lease, msg, code, pause = try(self, pool, wid)
    if not waits(lease, code) then return lease, msg, code end
    waited = started and max(slept, clock() - started) or slept
    step = min(step * ratio, max_step)
  end
  give_up(wid, here)
  return timed_out(self, waited, msg, code)
end
