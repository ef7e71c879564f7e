-- worker.lua - the Lua worker of the history checker: the same grants as
-- worker.c, through the leaselock Lua module (Lua 5.4 or LuaJIT), one
-- thread per process.
--
--   lua5.4|luajit worker.lua URI RUNDIR KEYPREFIX WORKER_ID SECONDS NKEYS SEED
--
-- One history line per grant in RUNDIR/WORKER_ID.t0.hist (format in
-- tests/history/README.md); times, sleeps and the lease's remaining time
-- come from the helper module histlua (CLOCK_MONOTONIC).
local ll = require "leaselock"
local hl = require "histlua"

local uri, rundir, prefix, wid = arg[1], arg[2], arg[3], arg[4]
local seconds, nkeys, seed = tonumber(arg[5]), tonumber(arg[6]), tonumber(arg[7])
assert(uri and rundir and prefix and wid and seconds and nkeys and seed,
  "usage: worker.lua URI RUNDIR KEYPREFIX WORKER_ID SECONDS NKEYS SEED")

local binding = jit and "luajit" or "lua5.4"
local name = wid .. ".t0"
local GUARD_NS = 2000000
local CHUNK_NS = 2000000
local TTLS = { 20, 20, 20, 25, 30, 50, 100, 250 }
local RENEW_TTLS = { 20, 20, 30, 50, 100 }
local now_ns = hl.now_ns

local h = seed % 2147483647
for i = 1, #wid do h = (h * 31 + wid:byte(i)) % 2147483647 end
math.randomseed(h)
local function rand(n) return math.random(0, n - 1) end   -- 0 .. n-1
local function pick(t) return t[math.random(1, #t)] end
local function ns_str(v) return string.format("%d", v) end

-- One grant as the worker sees it: the local deadline, conservatively late
-- (the clock read after the remaining time, plus the remaining), and tight,
-- the least such bound since the deadline last moved (worker.c).
local function hold_new(lease)
  assert(hl.fence(lease) == lease.fence, "histlua cannot read this leaselock.lease")
  local t_now = now_ns()
  -- jumps: moves later not made by the worker's own renews
  local h = { lease = lease, deadline = t_now, tight = t_now, lost = false, jumps = 0 }
  function h.read(reset)
    local t0 = now_ns()
    local r = hl.remaining_ms(lease)
    local t = now_ns()
    if r <= 0 then
      -- The engine can declare it lost before the deadline (a renewal
      -- answered NOT_HELD): the worker stops when it sees that.
      if not h.lost then h.lost_at = t end
      h.lost = true
      return
    end
    h.deadline = t + r * 1000000
    local jump = h.deadline - h.tight > 1000000 + t - t0
    if jump and not reset then h.jumps = h.jumps + 1 end
    if reset or jump or h.deadline < h.tight then h.tight = h.deadline end
  end
  function h.sleep(ns)
    local til = now_ns() + ns
    while not h.lost do
      local left = til - now_ns()
      if left <= 0 then break end
      hl.sleep_ns(left < CHUNK_NS and left or CHUNK_NS)
      h.read()
    end
  end
  h.read(true)
  return h
end

local counters = {}
for k = 0, nkeys - 1 do
  local path = rundir .. "/counter." .. k
  local f = io.open(path, "r+") or io.open(path, "w+")
  counters[k] = assert(f, path)
  f:setvbuf("no")
end

local function increment(h, f)
  h.read()
  if h.lost or h.deadline - now_ns() < GUARD_NS then return 0 end
  f:seek("set", 0)
  local v = tonumber(f:read("l") or "") or 0
  hl.sleep_ns(rand(300) * 1000)
  h.read()
  if h.lost or h.deadline - now_ns() < GUARD_NS then return 0 end
  f:seek("set", 0)
  f:write(string.format("%020d\n", v + 1))
  f:flush()
  return now_ns()
end

local client = assert(ll.connect(uri, { label = "history" }))
local out = assert(io.open(rundir .. "/" .. name .. ".hist", "w"))
out:write(string.format("# worker=%s binding=%s backend=%s\n", name, binding,
  tostring(client):match("%((%w+),") or "?"))
local grants, incs, errors = 0, 0, 0

local function one_grant()
  local k = rand(nkeys)
  local key = prefix .. "/" .. k
  local ttl = pick(TTLS)
  local auto_renew = rand(2) == 1
  local min_hold = rand(4) == 0 and 1 + rand(30) or 0
  local one_try = rand(3) == 0
  local lock = client:lock(key, { ttl = ttl / 1000, min_hold = min_hold / 1000,
                                  auto_renew = auto_renew })
  local lease, msg, code
  if one_try then lease, msg, code = lock:try_acquire()
  else lease, msg, code = lock:acquire({ timeout = 2 }) end
  if not lease then
    if code == "BUSY" then hl.sleep_ns(rand(1000) * 1000)
    elseif code ~= "TIMEOUT" then
      io.stderr:write(string.format("worker %s: acquire: %s %s\n", name, code, msg))
      errors = errors + 1
    end
    return
  end
  local t_acq = now_ns()
  local h = hold_new(lease)
  if h.lost then h.lost_at = t_acq end  -- it ran out before acquire returned: never held
  local steps = rand(4)
  local inc_step = rand(steps + 1)
  local renews, t_write, t_call, ended = 0, 0, nil, nil
  for s = 0, steps do
    if h.lost or ended then break end
    if s == inc_step then t_write = increment(h, counters[k]) end
    if s == steps then break end
    h.sleep(rand(math.floor(ttl * 1000 / 3)) * 1000)
    if not h.lost and rand(2) == 0 then
      local t = now_ns()
      local ok, _, rcode = lease:renew(pick(RENEW_TTLS) / 1000)
      if ok then
        renews = renews + 1
        h.read(true)
      elseif rcode == "NOT_HELD" or rcode == "LOST" then
        t_call, ended = t, (rcode == "LOST" and "lost" or "not-held")
      else
        errors = errors + 1
        h.read()
      end
    end
  end
  if not ended and not h.lost and not auto_renew and rand(4) == 0 then
    while not h.lost do h.sleep(CHUNK_NS) end  -- overstay until the deadline passes
  end
  if not ended and h.lost then ended = "lost" end
  if not ended then
    h.read()
    t_call = now_ns()
    local ok, _, rcode = lease:release()
    if ok then ended = "released"
    elseif rcode == "LOST" then ended = "lost"
    elseif rcode == "NOT_HELD" then ended = "not-held"
    else ended = "error"; errors = errors + 1 end
  end
  -- t_end: the least bound unless auto-renewal could have moved it (worker.c)
  local t_end, t_late = auto_renew and h.deadline or h.tight, h.deadline
  if h.lost_at and (not t_call or h.lost_at < t_call) then t_call = h.lost_at end
  if t_call and t_call < t_end then t_end = t_call end
  if t_call and t_call < t_late then t_late = t_call end
  out:write(string.format("%s %d %s %s %s %s %s %s %d %s %d ar=%d,mh=%d,rn=%d,ot=%d,jp=%d\n",
    key, lease.fence, ns_str(t_acq), ns_str(t_end), ns_str(t_late), ended, name, binding,
    t_write ~= 0 and 1 or 0, ns_str(t_write), ttl, auto_renew and 1 or 0, min_hold,
    renews, one_try and 1 or 0, h.jumps))
  grants = grants + 1
  if t_write ~= 0 then incs = incs + 1 end
  return ended
end

local end_ns = now_ns() + math.floor(seconds * 1e9)
while now_ns() < end_ns do
  -- A release that failed (a failover cut it) leaves the lease held and
  -- renewed: a full collection closes its handle (which releases it) before
  -- the next grant, that may pick the same key (the same coroutine asking
  -- again would be refused: it would wait for itself).
  if one_grant() == "error" then collectgarbage() else collectgarbage("step") end
end
out:write(string.format("# done grants=%d incs=%d errors=%d\n", grants, incs, errors))
out:close()
client:close()
