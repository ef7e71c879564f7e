-- make bench-lua: acquire+release pairs per second through lock:with beside
-- the same loop run by the C core alone (the bench-only module
-- leaselock_bench, bench/lua/lbench.c, with the same lock options), on
-- SQLite and on each server whose URI variable is set. A benchmark, not a
-- test: it prints figures and never fails on them.
local leaselock = require "leaselock"
local bench = require "leaselock_bench"

local tmp = os.getenv("LEASELOCK_BENCH_TMP") or "/tmp"
local interp = jit and jit.version or _VERSION
local n = tonumber(os.getenv("LEASELOCK_BENCH_N") or "") or 500
local rounds = tonumber(os.getenv("LEASELOCK_BENCH_ROUNDS") or "") or 61
local now = bench.monotonic

local targets = { { "sqlite", ("sqlite://%s/bench-%s.db"):format(tmp, jit and "jit" or "54") } }
for _, v in ipairs { { "mongodb", "MONGODB_URI" }, { "mysql", "MYSQL_URI" },
                     { "postgresql", "POSTGRESQL_URI" } } do
  local uri = os.getenv(v[2])
  if uri and uri ~= "" then targets[#targets + 1] = { v[1], uri } end
end

local function noop() return true end

for _, t in ipairs(targets) do
  local name, uri = t[1], t[2]
  local client = assert(leaselock.connect(uri, { label = "bench" }))
  local lock = client:lock(("bench/lua/%s/%d"):format(jit and "jit" or "54", os.time()))
  local core = assert(bench.core(uri))
  -- warm up both paths
  for _ = 1, 50 do assert(lock:with(noop)) end
  assert(core:pairs(lock.key, 50)) -- the lock's TTL: the default 30 s
  -- Many short rounds, interleaved with the first side alternating; the
  -- median and the fastest round of each side.
  local lua_r, core_r = {}, {}
  local function lua_round()
    local t0 = now()
    for _ = 1, n do assert(lock:with(noop)) end
    lua_r[#lua_r + 1] = n / (now() - t0)
  end
  local function core_round()
    core_r[#core_r + 1] = n / assert(core:pairs(lock.key, n))
  end
  for r = 1, rounds do
    if r % 2 == 1 then lua_round(); core_round() else core_round(); lua_round() end
  end
  -- (runs under LuaJIT too: no // and no table.unpack)
  local function median(t)
    table.sort(t)
    local h = math.floor(#t / 2)
    return #t % 2 == 1 and t[h + 1] or (t[h] + t[h + 1]) / 2
  end
  local med_lua, med_core = median(lua_r), median(core_r)
  local best_lua, best_core = lua_r[#lua_r], core_r[#core_r] -- sorted by median()
  print(("lua %-18s %-10s %d pairs x %d rounds (pairs/s: median, best round)"):format(interp, name, n, rounds))
  print(("  lock:with %9.0f %9.0f\n  C core    %9.0f %9.0f"):format(med_lua, best_lua, med_core, best_core))
  print(("  lock:with / C core = median %.3f, best %.3f   (goal >= 0.95)")
    :format(med_lua / med_core, best_lua / best_core))
  core:close()
  client:close()
end
